"""Other formats and places a model goes to or comes from: the sentence-transformers layout (read, then write),
the Hub push with its generated model card, local-path scrubbing for what is published, and exports for serving
(`export`: the plain sentence-transformers layout, ONNX / OpenVINO graphs, int8; `runtime`: `ExportedEncoder`, encode
over them). Imports modeling.
"""
