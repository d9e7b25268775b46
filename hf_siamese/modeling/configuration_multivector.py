"""Multi-vector (ColBERT-style late interaction) encoder configuration.

This file is copied next to the weights when a model is saved, so it must import only public libraries and its
remote-code siblings (text_encoding.py): Hub users load it as remote code with `trust_remote_code=True`, without
hf_siamese installed.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

from .text_encoding import check_encoder_config, max_tokens

MULTIVECTOR_TASKS = ("query", "document")
MULTIVECTOR_SIMILARITIES = ("maxsim", "meanmaxsim")
# How queries are widened with expansion tokens ([MASK]) that MaxSim scores (sentence-transformers' names):
# "fixed": every query is exactly `query_expansion_length` tokens (cut or filled); "min": at least that many.
QUERY_EXPANSIONS = ("fixed", "min")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


class MultiVectorConfig(PreTrainedConfig):
    r"""
    Configuration of a [`MultiVectorModel`]: an encoder whose token states, projected to `embedding_dim` and
    L2-normalised one by one, are a text's vectors (one per kept token); a query and a document score by MaxSim
    (for each query vector its largest dot product with a document vector, summed over the query's vectors).

    Everything that decides the vectors lives here, so a saved `config.json` alone reproduces them.

    Attributes:
        encoder_config (`dict` or `PreTrainedConfig`, *optional*):
            Config of the encoder (`AutoModel`: bert, distilbert, roberta, ...); defaults to a `BertConfig()`.
        embedding_dim (`int`, *optional*, defaults to 128):
            Width of each token vector: the projection's output size.
        projection_bias (`bool`, *optional*, defaults to `False`):
            Whether the projection has a bias (ColBERT's has none).
        normalize (`bool`, *optional*, defaults to `True`):
            L2-normalise every token vector (so a MaxSim term is a cosine).
        prompts (`dict[str, str]`, *optional*):
            Text put before a query (`"query"`) or a document (`"document"`) before tokenizing: ColBERT's markers
            (e.g. `{"query": "[Q] ", "document": "[D] "}`); sentence-transformers keeps them as its prompts.
        query_length (`int`, *optional*):
            Queries are cut to this many tokens (None: `max_seq_length`). With query expansion the expansion
            length decides instead ("fixed") or is the least a query gets ("min").
        document_length (`int`, *optional*):
            Documents are cut to this many tokens (None: `max_seq_length`).
        max_seq_length (`int`, *optional*):
            Texts without a length of their own are cut to this many tokens (None: the encoder's position limit).
        query_expansion (`str`, *optional*):
            ColBERT's query expansion: a query's padding up to `query_expansion_length` tokens becomes expansion
            tokens that its vectors (and MaxSim) include. `"fixed"`: every query exactly that long (longer ones cut);
            `"min"`: at least that long. None: off.
        query_expansion_length (`int`, *optional*, defaults to 32):
            The expanded query length.
        query_expansion_attend (`bool`, *optional*, defaults to `False`):
            Whether the encoder attends to the expansion tokens (classic ColBERT: no; they still get vectors).
        query_expansion_token_id (`int`, *optional*):
            The expansion token's id (the tokenizer's [MASK]); None: the tokenizer's mask token, else its end token.
        skiplist_ids (`list[int]`, *optional*):
            Token ids with no vector in the tasks of `skiplist_tasks` (ColBERT: punctuation, in documents).
        skiplist_tasks (`list[str]`, *optional*, defaults to `["document"]`):
            Which texts the skiplist applies to.
        similarity (`str`, *optional*, defaults to `"maxsim"`):
            `"maxsim"`, or `"meanmaxsim"` (MaxSim over the query's number of vectors).
    """

    model_type = "siamese-multivector"
    sub_configs_defaults = {"encoder_config": SubConfigSpec(config_class=AutoConfig, model_type="bert")}

    encoder_config: dict | PreTrainedConfig | None = None
    embedding_dim: int = 128
    projection_bias: bool = False
    normalize: bool = True
    prompts: dict[str, str] = field(default_factory=dict)
    query_length: int | None = None
    document_length: int | None = None
    max_seq_length: int | None = None
    query_expansion: str | None = None
    query_expansion_length: int = 32
    query_expansion_attend: bool = False
    query_expansion_token_id: int | None = None
    skiplist_ids: list[int] = field(default_factory=list)
    skiplist_tasks: list[str] = field(default_factory=lambda: ["document"])
    similarity: str = "maxsim"

    def __post_init__(self, **kwargs: Any) -> None:
        check_encoder_config("MultiVectorConfig", self.encoder_config)
        super().__post_init__(**kwargs)
        self.validate_multivector_fields()

    def validate_multivector_fields(self) -> None:
        """Raise `ValueError` naming the field and what it accepts for anything out of range."""
        name = type(self).__name__
        if self.similarity not in MULTIVECTOR_SIMILARITIES:
            raise ValueError(f"{name}: similarity={self.similarity!r} is not one of {list(MULTIVECTOR_SIMILARITIES)}.")
        if self.query_expansion is not None and self.query_expansion not in QUERY_EXPANSIONS:
            raise ValueError(
                f"{name}: query_expansion={self.query_expansion!r} is not one of {list(QUERY_EXPANSIONS)} or None."
            )
        for field_name in ("embedding_dim", "query_expansion_length"):
            if not _positive_int(getattr(self, field_name)):
                raise ValueError(f"{name}: {field_name}={getattr(self, field_name)!r} must be a positive whole number.")
        for field_name in ("query_length", "document_length", "max_seq_length"):
            value = getattr(self, field_name)
            if value is not None and not _positive_int(value):
                raise ValueError(f"{name}: {field_name}={value!r} must be a positive whole number or None.")
        for field_name in ("projection_bias", "normalize", "query_expansion_attend"):
            if not isinstance(getattr(self, field_name), bool):
                raise ValueError(f"{name}: {field_name}={getattr(self, field_name)!r} must be True or False.")
        token = self.query_expansion_token_id
        if token is not None and (isinstance(token, bool) or not isinstance(token, int) or token < 0):
            raise ValueError(f"{name}: query_expansion_token_id={token!r} must be a token id (a whole number >= 0).")
        if (
            self.query_expansion == "fixed"
            and self.query_length is not None
            and self.query_length < self.query_expansion_length
        ):
            raise ValueError(
                f"{name}: query_length={self.query_length} is below query_expansion_length="
                f"{self.query_expansion_length}; with query_expansion='fixed' every query is exactly the expansion "
                "length: raise query_length to at least it, or leave it None."
            )
        ids = self.skiplist_ids
        if not isinstance(ids, list | tuple) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids
        ):
            raise ValueError(f"{name}: skiplist_ids={ids!r} must be a list of token ids (whole numbers >= 0).")
        self.skiplist_ids = sorted(set(ids))
        tasks = self.skiplist_tasks
        if not isinstance(tasks, list | tuple) or not all(t in MULTIVECTOR_TASKS for t in tasks):
            raise ValueError(f"{name}: skiplist_tasks={tasks!r} must list tasks among {list(MULTIVECTOR_TASKS)}.")
        self.skiplist_tasks = list(tasks)
        if not isinstance(self.prompts, dict) or not all(
            k in MULTIVECTOR_TASKS and isinstance(v, str) for k, v in self.prompts.items()
        ):
            raise ValueError(
                f"{name}: prompts={self.prompts!r} must map tasks among {list(MULTIVECTOR_TASKS)} to prompt strings."
            )

    @property
    def hidden_size_of_encoder(self) -> int:
        """The width of the encoder's token states (the projection's input)."""
        encoder = self.encoder_config
        return int(getattr(encoder, "hidden_size", None) or encoder.dim)

    @property
    def effective_max_seq_length(self) -> int:
        """Texts are cut to at most this many tokens: `max_seq_length`, at most the encoder's positions (less
        RoBERTa's offset), 512 where neither says."""
        return max_tokens(self.encoder_config, self.max_seq_length)

    # What the training collator reads from a model's config (no classifier head; the tokenizer decides case).
    classifier_head = False
    do_lower_case = False


__all__ = ["MULTIVECTOR_SIMILARITIES", "MULTIVECTOR_TASKS", "QUERY_EXPANSIONS", "MultiVectorConfig"]
