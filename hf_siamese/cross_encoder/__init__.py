"""Cross-encoders: a transformers `AutoModelForSequenceClassification` over (query, document) pairs that reranks a
first stage's candidates or classifies / scores pairs (`CrossEncoder`), with its tokenization rule (the document is
cut, not the query), its collator, losses and trainer."""

from . import losses
from .collator import CrossEncoderCollator
from .model import CrossEncoder
from .source import model_kind
from .tokenization import tokenize_pairs
from .trainer import CrossEncoderTrainer

__all__ = ["CrossEncoder", "CrossEncoderCollator", "CrossEncoderTrainer", "losses", "model_kind", "tokenize_pairs"]
