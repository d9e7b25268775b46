"""`CrossEncoder`: a transformers `AutoModelForSequenceClassification` over (query, document) pairs, with the habits of
our `encode()` around it.

The model is the ecosystem's own class, so what `save_pretrained` writes loads without remote code in transformers
(`AutoModelForSequenceClassification`), in sentence-transformers' `CrossEncoder` (its v5.4+ files beside the weights,
the activation recorded in `config_sentence_transformers.json`) and in text-embeddings-inference's `/rerank` (root
`config.json` naming a `...ForSequenceClassification` with `id2label` / `label2id`, `tokenizer.json`,
`model.safetensors`). Scoring (`predict`, `rank`): each distinct pair once, tokenized once with the document cut
before the query (tokenization.py), batches sorted by length, bfloat16 on CPUs that run it natively, the classifier
head in float32 so that scores keep their order (bfloat16 logits tie, sentence-transformers #3894).
"""

from __future__ import annotations

import copy
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

from ..formats.local_paths import is_hub_id
from ..modeling.devices import resolve_device
from ..modeling.low_precision import cached_low_precision_copy, cpu_dtype, native_low_precision
from ..modeling.weight_files import naming_damaged_weights
from ..storage import replace_folder, staging_folder
from .forward import pair_logits
from .scoring import ACTIVATIONS, checked_pairs, chosen_activation, rank_documents, score_pairs, shaped
from .scoring import activation_name as _activation_name
from .scoring import recorded_activation as _recorded_activation
from .source import encoder_folder, is_ours, model_kind

logger = logging.getLogger(__name__)

ST_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")


class CrossEncoder:
    """A reranker or pair classifier: `model` (an `AutoModelForSequenceClassification`) with its tokenizer.

    Args:
        model: a `...ForSequenceClassification` with `num_labels` outputs (1: a relevance / similarity score).
        tokenizer: its tokenizer.
        max_length: tokens per pair (query and document together); defaults to the tokenizer's limit, at most 512
            and at most the encoder's positions (`position_limit`).
        activation: `"sigmoid"` (the default for one output: scores in (0, 1)) or `"identity"` (raw logits; the
            default for several outputs).

    `packing` (attribute, default True): score pairs end to end without padding where that is exact (BERT-family
    encoders, forward.py); False runs padded batches.
    """

    def __init__(self, model: Any, tokenizer: Any, max_length: int | None = None, activation: str | None = None):
        if not isinstance(model, nn.Module) or not hasattr(model.config, "num_labels"):
            raise ValueError(f"model: expected a transformers ...ForSequenceClassification, got {type(model).__name__}")
        self.model = model
        self.tokenizer = tokenizer
        limit = getattr(tokenizer, "model_max_length", 512)
        default = min(limit if isinstance(limit, int) and limit < 100_000 else 512, 512)
        positions = _position_limit(model)
        self.max_length = int(max_length or (min(default, positions[0] - positions[1]) if positions else default))
        self.activation = _activation_name(activation, self.num_labels)
        self.packing = True  # pairs run packed where that is exact (forward.py); False: padded batches

    # ------------------------------------------------------------------------------------------------ loading

    @classmethod
    def from_pretrained(
        cls,
        model_name_or_path: str | os.PathLike,
        max_length: int | None = None,
        activation: str | None = None,
        device: str | torch.device | None = None,
        **kwargs: Any,
    ) -> CrossEncoder:
        """Load a saved cross-encoder (ours, sentence-transformers', or any `...ForSequenceClassification` on the Hub
        or on disk). A bi-encoder folder is refused, naming `from_encoder` to start a cross-encoder from its weights.
        `kwargs` go to transformers' `from_pretrained` (`revision`, `token`, ...)."""
        source = os.fspath(model_name_or_path)
        if not os.path.exists(source) and not is_hub_id(source):
            raise FileNotFoundError(
                2,
                f"cross-encoder not found: {source!r} is no folder here and no Hub id ('name' or 'namespace/name')",
                source,
            )
        kind = model_kind(source)
        if kind == "bi-encoder":
            raise ValueError(
                f"{source!r} is a bi-encoder (a sentence-embedding model), not a cross-encoder: load it with "
                "SiameseBertModel.from_pretrained, or start a cross-encoder from its weights with "
                f"CrossEncoder.from_encoder({source!r}, num_labels=1) (a new, untrained classifier head)."
            )
        if kind == "encoder":
            raise ValueError(
                f"{source!r} is an encoder without a classification head (its config.json names no "
                f"...ForSequenceClassification): start a cross-encoder with CrossEncoder.from_encoder({source!r})."
            )
        config = AutoConfig.from_pretrained(source, **kwargs)
        check_saved_fusion_weights(source, config)
        with naming_damaged_weights(source):
            model = AutoModelForSequenceClassification.from_pretrained(source, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        if activation is None and Path(source).is_dir():
            recorded = _recorded_activation(Path(source), config)
            activation = _activation_name(recorded, config.num_labels) if recorded else None
        if max_length is None and Path(source, "sentence_bert_config.json").exists():
            saved = json.loads(Path(source, "sentence_bert_config.json").read_text(encoding="utf-8"))
            max_length = saved.get("max_seq_length")
        encoder = cls(model.eval(), tokenizer, max_length=max_length, activation=activation)
        return encoder.to(device) if device is not None else encoder

    @classmethod
    def from_encoder(
        cls,
        model_name_or_path: str | os.PathLike,
        num_labels: int = 1,
        max_length: int | None = None,
        activation: str | None = None,
        label2id: dict[str, int] | None = None,
        **kwargs: Any,
    ) -> CrossEncoder:
        """Start a cross-encoder from an encoder's weights with a new classifier head of `num_labels` outputs: a plain
        encoder (`bert-base-uncased`), a sentence-transformers embedding model, or our bi-encoder (its encoder)."""
        if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
            raise ValueError(f"num_labels={num_labels!r}: expected a positive int (1 for a relevance score)")
        if label2id is not None and len(label2id) != num_labels:
            raise ValueError(f"label2id has {len(label2id)} labels, num_labels={num_labels}")
        labels = {"num_labels": num_labels}
        if label2id is not None:
            labels.update(label2id=dict(label2id), id2label={index: name for name, index in label2id.items()})
        source = os.fspath(model_name_or_path)
        if model_kind(source) == "bi-encoder" and Path(source, "config.json").exists() and is_ours(source):
            model = _from_our_bi_encoder(source, labels)
            has_root_tokenizer = any(
                Path(source, name).exists() for name in ("tokenizer.json", "tokenizer_config.json")
            )
            tokenizer = AutoTokenizer.from_pretrained(
                source if has_root_tokenizer else encoder_folder(source), **kwargs
            )
        else:
            config = AutoConfig.from_pretrained(source, **labels, **kwargs)
            with naming_damaged_weights(source):
                model = AutoModelForSequenceClassification.from_pretrained(source, config=config, **kwargs)
            tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        return cls(model, tokenizer, max_length=max_length, activation=activation)

    # ------------------------------------------------------------------------------------------------ saving

    def save_pretrained(self, output: str | os.PathLike, overwrite: bool = True) -> Path:
        """Write the model where transformers, sentence-transformers' `CrossEncoder` and TEI's `/rerank` all load it:
        `config.json` + `model.safetensors` + the tokenizer (`tokenizer.json`) at the root, and sentence-transformers'
        `modules.json`, `sentence_bert_config.json`, `config_sentence_transformers.json` (the activation). Written in
        a staging folder and swapped in whole."""
        output = Path(output)
        if output.exists() and not output.is_dir():
            raise FileExistsError(
                f"{os.fspath(output)!r} is a file; a cross-encoder is saved as a folder: give a folder path"
            )
        if output.exists() and not overwrite and any(output.iterdir()):
            raise FileExistsError(f"{os.fspath(output)!r} exists; pass overwrite=True to replace it")
        staging = staging_folder(output, "save")
        try:
            self.write_files(staging)
            replace_folder(staging, output)
        except BaseException:
            import shutil

            shutil.rmtree(staging, ignore_errors=True)
            raise
        return output

    def write_files(self, folder: Path) -> None:
        """The files of `save_pretrained`, written into `folder` as it is (no staging)."""
        folder = Path(folder)
        self.model.save_pretrained(folder, safe_serialization=True)
        self.tokenizer.save_pretrained(folder)
        if not (folder / "tokenizer.json").exists():
            logger.warning("%s: no tokenizer.json (a slow tokenizer): TEI needs one to serve it", folder)
        self._write_sentence_transformers_files(folder)

    def _write_sentence_transformers_files(self, folder: Path) -> None:
        import transformers

        modules = [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"}
        ]
        module_config = {
            "transformer_task": "sequence-classification",
            "modality_config": {"text": {"method": "forward", "method_output_name": "logits"}},
            "module_output_name": "scores",
            "max_seq_length": self.max_length,
        }
        st_config = {
            "__version__": {"pytorch": torch.__version__, "transformers": transformers.__version__},
            "activation_fn": ACTIVATIONS[self.activation],
            "model_type": "CrossEncoder",
            "prompts": {},
            "default_prompt_name": None,
        }
        for name, value in zip(ST_FILES, (modules, module_config, st_config), strict=True):
            (folder / name).write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")

    # ------------------------------------------------------------------------------------------------ state

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def num_labels(self) -> int:
        return int(self.model.config.num_labels)

    @property
    def first_stage_weight(self) -> float:
        """The weight of the first stage's score when this reranker reorders a search's hits (`rerank_hits`:
        `(1 - w) * z(reranker) + w * z(first stage)`); 0: the reranker's order alone. `hf-siamese train-reranker`
        chooses it on held-out queries; it is saved in config.json (transformers, sentence-transformers and TEI ignore
        it: they give the reranker's own scores)."""
        from ..retrieval.fusion.rerank import check_first_stage_weight

        value = getattr(self.model.config, "first_stage_weight", None)
        return 0.0 if value is None else check_first_stage_weight(value)

    @first_stage_weight.setter
    def first_stage_weight(self, value: float) -> None:
        from ..retrieval.fusion.rerank import check_first_stage_weight

        self.model.config.first_stage_weight = check_first_stage_weight(value)

    @property
    def stage_weights(self) -> dict[str, float] | None:
        """The weights of each first stage's own score when this reranker reorders a hybrid search's hits
        (`rerank.fuse_stages`: `(1 - a - b) z(reranker) + a z(dense) + b z(lexical)`), or None (the two-score order of
        `first_stage_weight`). `hf-siamese train-reranker` sets them where they beat the two-score order on held-out
        queries; saved in config.json."""
        from ..retrieval.fusion.rerank import check_stage_weights

        return check_stage_weights(getattr(self.model.config, "stage_weights", None))

    @stage_weights.setter
    def stage_weights(self, value: dict[str, float] | None) -> None:
        from ..retrieval.fusion.rerank import check_stage_weights

        self.model.config.stage_weights = check_stage_weights(value)

    @property
    def fusion_corpus(self) -> dict[str, Any] | None:
        """The corpus the saved fusion weights were chosen on: `{"name", "split", "fingerprint"}`
        (`retrieval.fingerprint.corpus_fingerprint` of its document ids), set by `train-reranker` and `eval
        --choose-fusion`; None where unknown. The weights rank that corpus only; any other takes the setting-free
        order (`retrieval.rerank.rerank_hits`)."""
        value = getattr(self.model.config, "fusion_corpus", None)
        return value if isinstance(value, dict) and isinstance(value.get("fingerprint"), str) else None

    @fusion_corpus.setter
    def fusion_corpus(self, value: dict[str, Any] | None) -> None:
        if value is not None and not (isinstance(value, dict) and isinstance(value.get("fingerprint"), str)):
            raise ValueError(f"fusion_corpus={value!r:.80}; expected None or a dict with a 'fingerprint' string")
        self.model.config.fusion_corpus = value

    @property
    def position_limit(self) -> tuple[int, int] | None:
        """`(max_position_embeddings, offset)` of an encoder with learned positions: a pair reads at most
        `max_position_embeddings - offset` tokens (the offset: RoBERTa's position ids start after its padding index,
        at 2); None for an encoder without a position table (relative or rotary positions)."""
        return _position_limit(self.model)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device: str | torch.device) -> CrossEncoder:
        self.model.to(resolve_device(device))
        return self

    # ------------------------------------------------------------------------------------------------ scoring

    @torch.inference_mode()
    def predict(
        self,
        pairs: Sequence[Sequence[str]],
        batch_size: int = 32,
        show_progress_bar: bool = False,
        activation: bool | str = True,
        convert_to_numpy: bool = True,
        dtype: torch.dtype | str | None = "auto",
        device: str | torch.device | None = None,
        max_length: int | None = None,
    ) -> np.ndarray | torch.Tensor:
        """Score (query, document) pairs.

        Args:
            pairs: `(query, document)` string pairs (lists or tuples); a single pair gives a single score row.
            batch_size: pairs per forward pass (batches are sorted by length, so each pads only to its longest).
            activation: True: the model's activation (`self.activation`); False: raw logits; or a name.
            dtype: `"auto"` (bfloat16 on a CPU or GPU that runs it natively, else float32), None / float32, or
                `torch.bfloat16` / `torch.float16`. The classifier head always runs in float32.
            device: where to run (the model moves there and stays); defaults to the model's device.
            max_length: tokens per pair; defaults to `self.max_length`. Longer pairs lose document tokens first.

        Returns:
            float32 scores `(len(pairs),)` for one output, `(len(pairs), num_labels)` for several; in input order.
        """
        rows, single = checked_pairs(pairs, batch_size)
        scoring = chosen_activation(self, activation)
        if device is not None:
            self.to(device)
        device = self.device
        run_dtype = self._run_dtype(dtype, device)
        runner = None  # the float32 model; or a low-precision copy of it under its float32 classifier head
        if rows and run_dtype not in (None, torch.float32):
            runner = cached_low_precision_copy(self.model, run_dtype)

        def logits_of(batch: dict[str, Any]) -> torch.Tensor:
            moved = {key: value.to(device) if torch.is_tensor(value) else value for key, value in batch.items()}
            with torch.no_grad():
                return pair_logits(self.model, moved, packing=self.packing, runner=runner)

        workers = torch.get_num_threads() if device.type == "cpu" else 1
        was_training = self.model.training
        self.model.eval()
        try:
            scores = score_pairs(self, rows, max_length, scoring, batch_size, logits_of, workers, show_progress_bar)
        finally:
            self.model.train(was_training)
        return shaped(scores, self.num_labels, single, convert_to_numpy)

    # rank(query, documents, top_k=None, return_documents=False, **predict_kwargs): `[{"corpus_id", "score"[,
    # "text"]}]`, best first; the same function ranks with an exported graph.
    rank = rank_documents

    @staticmethod
    def _run_dtype(dtype: Any, device: torch.device) -> torch.dtype | None:
        if dtype == "auto":
            if device.type == "cpu":
                return torch.bfloat16 if native_low_precision(torch.bfloat16) else torch.float32
            return torch.bfloat16 if device.type == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype.removeprefix("torch."), None)
        if dtype not in (None, torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"dtype={dtype!r}: expected 'auto', None, torch.float32, torch.bfloat16 or torch.float16")
        return cpu_dtype(dtype, device)


def load_cross_encoder_model(path: str, *, device: str | torch.device | None = None, **options: Any) -> tuple[Any, Any]:
    """`(CrossEncoder, tokenizer)` of a saved cross-encoder: the loader the model-kind registry names for the
    "cross-encoder" kind (`hf_siamese.modeling.kinds`)."""
    model = CrossEncoder.from_pretrained(path, device=device, **options)
    return model, model.tokenizer


def check_saved_fusion_weights(source: str, config: Any) -> None:
    """Refuse a `first_stage_weight` or `stage_weights` saved in config.json that reranking would not take (a
    string, a boolean, a number outside [0, 1]; see `rerank.check_first_stage_weight`, `check_stage_weights`),
    naming the file and the key; absent or null, the reranker has none."""
    from ..retrieval.fusion.rerank import check_first_stage_weight, check_stage_weights

    where = os.path.join(source, "config.json") if os.path.isdir(source) else f"{source} (config.json)"
    for key, check in (("first_stage_weight", check_first_stage_weight), ("stage_weights", check_stage_weights)):
        value = getattr(config, key, None)
        if value is None:
            continue
        try:
            check(value)
        except ValueError as error:
            raise ValueError(f"{where}: {error}; correct the saved value, or remove the key") from None


def _position_limit(model: Any) -> tuple[int, int] | None:
    """`CrossEncoder.position_limit` of `model` (a `...ForSequenceClassification`), read from its position table."""
    prefix = getattr(model, "base_model_prefix", None)
    base = getattr(model, prefix, model) if isinstance(prefix, str) and prefix else model
    table = getattr(getattr(base, "embeddings", None), "position_embeddings", None)
    if not isinstance(table, nn.Embedding):
        return None
    return table.num_embeddings, 0 if table.padding_idx is None else table.padding_idx + 1


def _from_our_bi_encoder(source: str, labels: dict[str, Any]) -> Any:
    """A `...ForSequenceClassification` whose base model takes the encoder weights of our bi-encoder at `source`
    (the pooler and the classifier head new)."""
    from ..modeling.modeling_siamese import SiameseBertModel

    bi_encoder = SiameseBertModel.from_pretrained(source)
    config = copy.deepcopy(bi_encoder.encoder.config)
    for key, value in labels.items():
        setattr(config, key, value)
    config.architectures = None
    model = AutoModelForSequenceClassification.from_config(config)
    base = getattr(model, model.base_model_prefix)
    missing, unexpected = base.load_state_dict(bi_encoder.encoder.state_dict(), strict=False)
    missing = [key for key in missing if not key.startswith("pooler.")]
    if missing or unexpected:
        raise ValueError(
            f"{source!r}: its encoder does not fit {type(model).__name__}: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}"
        )
    return model
