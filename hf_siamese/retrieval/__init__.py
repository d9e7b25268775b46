"""Retrieval with an encoder: hard-negative mining, the persistent vector index and the model fingerprint it records,
corpus embedding into resumable Parquet shards (`corpus`), the prompt of each side (`prompts`), and the second stage
of a search (`rerank`: any object with `predict(pairs)`, such as a cross-encoder, re-scores a first stage's hits). The
IR metrics of a model on a retrieval set are `hf_siamese.evaluation`'s (`RetrievalEvaluator`). Imports modeling, data
and metrics.
"""

from .exact import exact_search, retrieval_metrics_from_embeddings

__all__ = ["exact_search", "retrieval_metrics_from_embeddings"]
