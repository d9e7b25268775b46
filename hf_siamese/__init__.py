"""hf-siamese: Sentence-BERT style siamese encoders as first-class transformers models.

Importing the package registers `SiameseBertConfig` / `SiameseBertModel` (dense) and `SparseSiameseConfig` /
`SparseSiameseModel` (learned sparse) and `MultiVectorConfig` / `MultiVectorModel` (multi-vector, ColBERT-style) with
`AutoConfig` / `AutoModel`, and marks them for auto-class export so `save_pretrained` writes `auto_map` and copies
the modeling code: a saved folder then loads anywhere with `AutoModel.from_pretrained(path, trust_remote_code=True)`.
"""

from transformers import AutoConfig, AutoModel

from . import losses
from .cross_encoder.arguments import CrossEncoderTrainingArguments
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
from .evaluation.retrieval import evaluate_retrieval
from .metrics import STS_SPEARMAN
from .modeling import distributed
from .modeling.configuration_multivector import MultiVectorConfig
from .modeling.configuration_siamese import SiameseBertConfig
from .modeling.configuration_sparse import SparseSiameseConfig
from .modeling.modeling_multivector import MultiVectorModel
from .modeling.modeling_siamese import (
    SiameseBertModel,
    SiameseBertOutput,
    SiameseBertPreTrainedModel,
    pool_token_states,
)
from .modeling.modeling_sparse import SparseSiameseModel
from .modeling.multivector_scoring import maxsim
from .modeling.quantization import quantize
from .retrieval.mining.negatives import mine_hard_negatives
from .training.arguments import SiameseTrainingArguments
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
AutoConfig.register(SparseSiameseConfig.model_type, SparseSiameseConfig, exist_ok=True)
AutoModel.register(SparseSiameseConfig, SparseSiameseModel, exist_ok=True)
SparseSiameseConfig.register_for_auto_class()
SparseSiameseModel.register_for_auto_class("AutoModel")
AutoConfig.register(MultiVectorConfig.model_type, MultiVectorConfig, exist_ok=True)
AutoModel.register(MultiVectorConfig, MultiVectorModel, exist_ok=True)
MultiVectorConfig.register_for_auto_class()
MultiVectorModel.register_for_auto_class("AutoModel")

__version__ = "0.1.0"


# Loaded on first use, so `import hf_siamese` stays fast: the metric functions import `evaluate` (seconds), the
# retrieval modules faiss / pyarrow when present.
_LAZY = {
    **dict.fromkeys(("paired_similarities", "sts_correlations", "sts_metrics_from_embeddings"), "metrics"),
    "VectorIndex": "retrieval.stores.folder",
    "build_index": "retrieval.stores",
    "add_lexical": "retrieval.index.additions",
    "load_index": "retrieval.stores",
    "attach_reranker": "retrieval.index.additions",
    "LexicalSettings": "retrieval.index.lexical",
    **dict.fromkeys(("encode_corpus", "read_corpus_shards"), "retrieval.corpus"),
    **dict.fromkeys(("similar_pairs", "cluster"), "retrieval.similar"),
    **dict.fromkeys(("export_model", "export_cross_encoder"), "serving.export"),
    "ExportedEncoder": "serving.encoder",
    "ExportedCrossEncoder": "serving.reranker",
    "load_exported": "serving.loader",
    "CrossEncoder": "cross_encoder.model",
    "CrossEncoderTrainer": "cross_encoder.trainer",
    "teacher_scores": "cross_encoder.teacher",
    "augmented_sbert": "recipes.augmented",
    "adapt": "recipes.adapt",
    **dict.fromkeys(("student_from_teacher", "teacher_embeddings"), "training.students"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CrossEncoder",
    "CrossEncoderTrainer",
    "teacher_scores",
    "augmented_sbert",
    "adapt",
    "student_from_teacher",
    "teacher_embeddings",
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
    "SparseSiameseConfig",
    "SparseSiameseModel",
    "MultiVectorConfig",
    "MultiVectorModel",
    "maxsim",
    "SiameseTrainer",
    "SiameseTrainingArguments",
    "CrossEncoderTrainingArguments",
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
    "add_lexical",
    "LexicalSettings",
    "load_index",
    "attach_reranker",
    "encode_corpus",
    "read_corpus_shards",
    "similar_pairs",
    "cluster",
    "export_model",
    "export_cross_encoder",
    "ExportedEncoder",
    "ExportedCrossEncoder",
    "load_exported",
]
