"""Cross-encoders: a transformers `AutoModelForSequenceClassification` over (query, document) pairs that reranks a
first stage's candidates or classifies / scores pairs (`CrossEncoder`), with its tokenization rule (the document is
cut, not the query)."""

from .model import CrossEncoder
from .source import model_kind
from .tokenization import tokenize_pairs

__all__ = ["CrossEncoder", "model_kind", "tokenize_pairs"]
