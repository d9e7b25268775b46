"""Other formats and places a model goes to or comes from: the sentence-transformers layout (read, then write),
the Hub push with its generated model card, and local-path scrubbing for what is published. Imports modeling.
"""
