"""hf-siamese: Sentence-BERT style siamese encoders as first-class transformers models.

Importing the package registers `SiameseBertConfig` / `SiameseBertModel` with `AutoConfig` / `AutoModel`, and
marks both for auto-class export so `save_pretrained` writes `auto_map` and copies the modeling code: a saved
folder then loads anywhere with `AutoModel.from_pretrained(path, trust_remote_code=True)`.
"""

from transformers import AutoConfig, AutoModel

from .configuration_siamese import SiameseBertConfig
from .modeling_siamese import SiameseBertModel, SiameseBertOutput, SiameseBertPreTrainedModel, pool_token_states

AutoConfig.register(SiameseBertConfig.model_type, SiameseBertConfig, exist_ok=True)
AutoModel.register(SiameseBertConfig, SiameseBertModel, exist_ok=True)
SiameseBertConfig.register_for_auto_class()
SiameseBertModel.register_for_auto_class("AutoModel")

__version__ = "0.1.0"

__all__ = [
    "SiameseBertConfig",
    "SiameseBertModel",
    "SiameseBertOutput",
    "SiameseBertPreTrainedModel",
    "pool_token_states",
]
