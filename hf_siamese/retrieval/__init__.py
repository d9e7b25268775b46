"""Retrieval with an encoder, by job: the folder index and its parts (`index`), where an index lives (`stores`: a
registry, the folder by default, Milvus registered, another engine one module and one `register_store`), exact search
by a model's own scores (`ranking`: learned-sparse term weights, multi-vector MaxSim), the fusion of first-stage lists
and the second stage (`fusion`), hard-negative mining (`mining`); beside them corpus embedding into resumable Parquet
shards (`corpus`), a corpus searched without an index (`corpus_search`), the package's one exact top-k (`exact`),
similar pairs and clusters (`similar`) and each side's prompt (`prompts`). The IR metrics of a model on a retrieval
set are `hf_siamese.evaluation`'s (`RetrievalEvaluator`). Imports modeling, data, metrics and storage.
"""

from .exact import exact_search, retrieval_metrics_from_embeddings

__all__ = ["exact_search", "retrieval_metrics_from_embeddings"]
