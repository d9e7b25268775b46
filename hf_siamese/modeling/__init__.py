"""The model: `SiameseBertConfig`, `SiameseBertModel` (encoder + pooling (+ projections) (+ normalize) (+ softmax
head)), `encode`, packed (padding-free) execution, short-text attention, int8 quantization and encoding across
processes.

configuration_siamese, modeling_siamese, pooling, checkpoints, weight_files, encoding, low_precision, batching,
devices, packing and short_attention are the flat set that `save_pretrained` copies next to the weights as remote
code (transformers copies the model's file and, transitively, every sibling it imports relatively): they import only
each other (relatively) and public libraries. The only references to the rest of hf_siamese are three optional hooks
in checkpoints (reading and writing the sentence-transformers layout, the Hub push with a model card), each behind
`except ImportError`.

configuration_sparse, modeling_sparse, sparse_csr, sparse_head, sparse_pooling and text_encoding are the sparse
kind's own set (`SparseSiameseConfig`, `SparseSiameseModel`: SPLADE and inference-free SPLADE term weights, and CSR, a
sparse autoencoder over a dense `SiameseBertModel`), copied the same way and importing only each other, the dense set
(for CSR) and public libraries.

configuration_multivector, modeling_multivector, multivector_scoring, text_encoding, batching and low_precision are
the multi-vector (ColBERT-style late interaction) kind's own set (`MultiVectorConfig`, `MultiVectorModel`, MaxSim),
copied the same way and importing only each other and public libraries. text_encoding (what the sparse and
multi-vector kinds' `encode` share) is in both of their sets; batching (its CPU batch pool, `run_batches`) and
low_precision (encoding in bfloat16) are in the dense set too.
"""
