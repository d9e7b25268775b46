"""hf-siamese: Sentence-BERT style siamese encoders as first-class transformers models.

Importing the package registers `SiameseBertConfig` / `SiameseBertModel` with `AutoConfig` / `AutoModel`, and
marks both for auto-class export so `save_pretrained` writes `auto_map` and copies the modeling code: a saved
folder then loads anywhere with `AutoModel.from_pretrained(path, trust_remote_code=True)`.
"""

from transformers import AutoConfig, AutoModel

from . import losses
from .data import (
    DataFormatError,
    DatasetLoadError,
    RetrievalDataset,
    load_demo_dataset,
    load_pairs,
    read_beir,
    read_nli_csv,
    read_pairs_file,
    read_sts_benchmark,
)
from .metrics import STS_SPEARMAN
from .modeling import distributed
from .modeling.configuration_siamese import SiameseBertConfig
from .modeling.modeling_siamese import (
    SiameseBertModel,
    SiameseBertOutput,
    SiameseBertPreTrainedModel,
    pool_token_states,
)
from .modeling.quantization import quantize
from .retrieval.evaluation import evaluate_retrieval
from .retrieval.mining import mine_hard_negatives
from .training.averaging import (
    WeightAveragingCallback,
    choose_interpolation,
    interpolate_toward,
    interpolate_weights,
    keep_average_if_better,
    parse_interpolation,
)
from .training.collator import SiamesePairCollator
from .training.sampler import NoDuplicatesBatchSampler
from .training.trainer import SiameseTrainer

AutoConfig.register(SiameseBertConfig.model_type, SiameseBertConfig, exist_ok=True)
AutoModel.register(SiameseBertConfig, SiameseBertModel, exist_ok=True)
SiameseBertConfig.register_for_auto_class()
SiameseBertModel.register_for_auto_class("AutoModel")

__version__ = "0.1.0"

_METRIC_FUNCTIONS = ("paired_similarities", "sts_correlations", "sts_metrics_from_embeddings")
_VECTOR_INDEX = ("VectorIndex", "build_index", "load_index")
_CORPUS = ("encode_corpus", "read_corpus_shards")
_SIMILAR = ("similar_pairs", "cluster")


def __getattr__(name: str):
    # The metric functions import `evaluate` (seconds); load them on first use.
    if name in _METRIC_FUNCTIONS:
        from . import metrics

        return getattr(metrics, name)
    if name in _VECTOR_INDEX:  # loaded on first use too: `import hf_siamese` stays as fast (faiss only on use)
        from .retrieval import vector_index

        return getattr(vector_index, name)
    if name in _CORPUS:  # streamed corpus embedding: loaded on first use as well
        from .retrieval import corpus

        return getattr(corpus, name)
    if name in _SIMILAR:  # pairs and groups from the neighbour graph: loaded on first use as well
        from .retrieval import similar

        return getattr(similar, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DataFormatError",
    "DatasetLoadError",
    "load_demo_dataset",
    "load_pairs",
    "read_nli_csv",
    "read_pairs_file",
    "read_sts_benchmark",
    "read_beir",
    "RetrievalDataset",
    "evaluate_retrieval",
    "mine_hard_negatives",
    "STS_SPEARMAN",
    "NoDuplicatesBatchSampler",
    "SiameseBertConfig",
    "SiameseBertModel",
    "SiameseBertOutput",
    "SiameseBertPreTrainedModel",
    "SiamesePairCollator",
    "SiameseTrainer",
    "WeightAveragingCallback",
    "interpolate_weights",
    "interpolate_toward",
    "keep_average_if_better",
    "parse_interpolation",
    "choose_interpolation",
    "losses",
    "distributed",
    "paired_similarities",
    "pool_token_states",
    "quantize",
    "sts_correlations",
    "sts_metrics_from_embeddings",
    "VectorIndex",
    "build_index",
    "load_index",
    "encode_corpus",
    "read_corpus_shards",
    "similar_pairs",
    "cluster",
]
