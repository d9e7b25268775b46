"""Cross-encoders: a transformers `AutoModelForSequenceClassification` over (query, document) pairs that reranks a
first stage's candidates or classifies / scores pairs (`CrossEncoder`), with its tokenization rule (the document is
cut, not the query), its collator, losses and trainer, its evaluation (reranking a first stage's candidates, STS,
accuracy) and its training rows (hard negatives mined by a bi-encoder plus random ones)."""

from ..training.arguments import CrossEncoderTrainingArguments
from . import losses
from .augment import neighbour_pairs, silver_pairs
from .collator import CrossEncoderCollator
from .data import reranker_training_rows
from .evaluation import RerankingDataset, evaluate_classification, evaluate_scores
from .fusion_weights import choose_first_stage_weight, choose_fusion, evaluate_reranking
from .model import CrossEncoder
from .source import model_kind
from .teacher import teacher_scores
from .tokenization import tokenize_pairs
from .trainer import CrossEncoderTrainer

__all__ = [
    "CrossEncoder",
    "CrossEncoderCollator",
    "CrossEncoderTrainer",
    "CrossEncoderTrainingArguments",
    "RerankingDataset",
    "choose_first_stage_weight",
    "choose_fusion",
    "evaluate_classification",
    "evaluate_reranking",
    "evaluate_scores",
    "losses",
    "model_kind",
    "neighbour_pairs",
    "reranker_training_rows",
    "silver_pairs",
    "teacher_scores",
    "tokenize_pairs",
]
