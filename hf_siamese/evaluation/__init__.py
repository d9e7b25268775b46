"""The evaluators, all in one place. An evaluator is a callable object that holds its data and settings,
`evaluator(model) -> dict[str, float]`, and names its headline number (`primary_metric`); both trainers take
evaluators as (or among) their `eval_dataset`, and `hf-siamese eval` builds one and calls it.

* the contract (`Evaluator`, `is_evaluator`, `prefixed_metrics`, `evaluator_primary_key`) and the STS evaluator of a
  bi-encoder (`EmbeddingSimilarityEvaluator`): `evaluator`;
* the IR metrics of a model on a retrieval set, one or two stages (`RetrievalEvaluator`, `evaluate_retrieval`):
  `retrieval`, with the first-stage runs it scores in `retrieval_runs`;
* the cross-encoder's: reranking a first stage's candidates (`RerankingDataset`: `reranking_set`;
  `RerankingEvaluator`, `evaluate_reranking`: `reranking`), STS and accuracy of labelled pairs
  (`PairScoreEvaluator`, `PairClassificationEvaluator`, `evaluate_scores`, `evaluate_classification`: `pairs`). They
  need nothing of the cross-encoder but its `predict(pairs, batch_size=, show_progress_bar=)`.

Each metric is computed in one place, the `evaluate` scripts of `hf_siamese.metrics`; the evaluators embed, search or
score, and hand the numbers to them. Imports modeling, data, metrics, retrieval and storage. The trainers' evaluation
loops stay with their trainers (`training.trainer_evaluation`, `cross_encoder.trainer_evaluation`).
"""

from .evaluator import EmbeddingSimilarityEvaluator, Evaluator, evaluator_primary_key, is_evaluator, prefixed_metrics
from .pairs import PairClassificationEvaluator, PairScoreEvaluator, evaluate_classification, evaluate_scores
from .reranking import RerankingEvaluator, evaluate_reranking
from .reranking_set import RerankingDataset
from .retrieval import RetrievalEvaluator, evaluate_retrieval

__all__ = [
    "EmbeddingSimilarityEvaluator",
    "Evaluator",
    "PairClassificationEvaluator",
    "PairScoreEvaluator",
    "RerankingDataset",
    "RerankingEvaluator",
    "RetrievalEvaluator",
    "evaluate_classification",
    "evaluate_reranking",
    "evaluate_retrieval",
    "evaluate_scores",
    "evaluator_primary_key",
    "is_evaluator",
    "prefixed_metrics",
]
