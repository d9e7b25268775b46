"""Other formats and places a model goes to or comes from: the sentence-transformers layout (read, then write),
`load_model` for any checkpoint, the Hub push with its generated model card, and local-path scrubbing for what is
published. Exports for serving (ONNX / OpenVINO, int8) are in `hf_siamese.serving`. Imports modeling and storage.
"""
