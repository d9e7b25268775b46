"""Cross-encoders: a transformers `AutoModelForSequenceClassification` over (query, document) pairs that reranks a
first stage's candidates or classifies / scores pairs (`CrossEncoder`), with its tokenization rule (the document is
cut, not the query), its collator, losses, training arguments and trainer, the choice of its fusion weights
(`choose_first_stage_weight`, `choose_fusion`), its training rows (hard negatives mined by a bi-encoder plus random
ones) and the training of a reranker in one call (`train_reranker`). Its evaluation (reranking a first stage's
candidates, STS, accuracy) is `hf_siamese.evaluation`'s, importable from here too."""

from ..evaluation.pairs import PairClassificationEvaluator, PairScoreEvaluator, evaluate_classification, evaluate_scores
from ..evaluation.reranking import RerankingEvaluator, evaluate_reranking
from ..evaluation.reranking_set import RerankingDataset
from . import losses
from .arguments import CrossEncoderTrainingArguments
from .augment import neighbour_pairs, silver_pairs
from .collator import CrossEncoderCollator
from .data import reranker_training_rows
from .fit import (
    RERANKER_LOSSES,
    RerankerTrainingResult,
    check_reranker_loss,
    choose_reranker_loss,
    reranker_row_shape,
    reranker_to_train,
    train_reranker,
)
from .fusion_weights import choose_first_stage_weight, choose_fusion
from .model import CrossEncoder
from .source import model_kind
from .teacher import teacher_scores
from .tokenization import tokenize_pairs
from .trainer import CrossEncoderTrainer

__all__ = [
    "RERANKER_LOSSES",
    "CrossEncoder",
    "CrossEncoderCollator",
    "CrossEncoderTrainer",
    "CrossEncoderTrainingArguments",
    "PairClassificationEvaluator",
    "PairScoreEvaluator",
    "RerankerTrainingResult",
    "RerankingDataset",
    "RerankingEvaluator",
    "check_reranker_loss",
    "choose_first_stage_weight",
    "choose_fusion",
    "choose_reranker_loss",
    "evaluate_classification",
    "evaluate_reranking",
    "evaluate_scores",
    "losses",
    "model_kind",
    "neighbour_pairs",
    "reranker_row_shape",
    "reranker_to_train",
    "reranker_training_rows",
    "silver_pairs",
    "teacher_scores",
    "tokenize_pairs",
    "train_reranker",
]
