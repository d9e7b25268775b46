"""Which model made a set of embeddings: a fingerprint of a `SiameseBertModel`'s embedding config and weights, cheap
to compute whatever the model size, and the words for how two fingerprints differ. A vector index records it, so that
queries are never embedded by a model other than the one that embedded the corpus.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch

from ...modeling.modeling_siamese import HEAD_PARAMETER_PREFIXES

# Values hashed per parameter tensor: all of a smaller tensor, evenly strided ones of a larger one (an embedding
# matrix of 768-dim rows still gets about two values per row), so a fingerprint costs milliseconds, not a full read.
_WEIGHT_SAMPLES = 65_536
# Encoder config keys that describe how a config was saved or run, not the function the encoder computes.
_VOLATILE_ENCODER_KEYS = frozenset(
    "transformers_version architectures dtype torch_dtype use_cache return_dict output_attentions "
    "output_hidden_states id2label label2id num_labels problem_type".split()
)
# SiameseBertConfig fields that change the embedding (besides the encoder config and the effective max length).
_EMBEDDING_FIELDS = (
    "pooling include_prompt projections truncate_dim normalize similarity prompts default_prompt_name do_lower_case"
).split()


def embedding_config(model: Any) -> dict[str, Any]:
    """The config fields that decide a model's sentence embedding (JSON-ready), as recorded in an index."""
    config = model.config
    encoder = config.encoder_config
    encoder = encoder.to_dict() if hasattr(encoder, "to_dict") else dict(encoder or {})
    fields = {
        "encoder": {k: v for k, v in encoder.items() if not k.startswith("_") and k not in _VOLATILE_ENCODER_KEYS},
        "max_seq_length": config.effective_max_seq_length,
        "embedding_size": config.embedding_size,
    }
    fields.update({name: getattr(config, name) for name in _EMBEDDING_FIELDS})
    return json.loads(json.dumps(fields, sort_keys=True, default=str))  # the form index.json gives back


def model_fingerprint(model: Any) -> dict[str, Any]:
    """`{"fingerprint", "config_sha256", "weights_sha256", "weights_dtype", "config"}` of a `SiameseBertModel`.

    The config part hashes `embedding_config(model)`; the weights part hashes, for every parameter tensor that feeds
    the embedding (not the softmax head), its name, shape, dtype and the bytes of up to 65,536 evenly strided values.
    Any real change of weights (fine-tuning, another checkpoint, another dtype) changes it; computing it reads a few MB
    whatever the model size.
    """
    config = embedding_config(model)
    config_sha = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    weights = hashlib.sha256()
    dtypes = set()
    for name, parameter in sorted(model.named_parameters()):
        if name.startswith(HEAD_PARAMETER_PREFIXES):
            continue
        flat = parameter.detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // _WEIGHT_SAMPLES)][:_WEIGHT_SAMPLES].contiguous().cpu()
        weights.update(f"{name}|{tuple(parameter.shape)}|{parameter.dtype}|".encode())
        weights.update(sample.view(torch.uint8).numpy().tobytes())
        dtypes.add(str(parameter.dtype).removeprefix("torch."))
    weights_sha = weights.hexdigest()
    return {
        "fingerprint": hashlib.sha256(f"{config_sha}:{weights_sha}".encode()).hexdigest(),
        "config_sha256": config_sha,
        "weights_sha256": weights_sha,
        "weights_dtype": ",".join(sorted(dtypes)),
        "config": config,
    }


def recorded_name(name: str) -> str:
    """The model's name or path as worth recording: an existing local folder becomes absolute."""
    name = str(name or "")
    return os.path.abspath(name) if name and Path(name).exists() else name


def describe_mismatch(recorded: dict[str, Any], current: dict[str, Any]) -> str:
    """What differs between two fingerprints, in words."""
    if recorded.get("config_sha256") != current["config_sha256"]:
        old, new = recorded.get("config", {}), current["config"]
        parts = []
        for key in sorted(set(old) | set(new)):
            if old.get(key) == new.get(key):
                continue
            if key == "encoder":
                a, b = old.get(key) or {}, new.get(key) or {}
                keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
                parts.append(f"encoder config ({', '.join(keys[:6])})")
            else:
                parts.append(f"{key} ({old.get(key)!r} in the index, {new.get(key)!r} in this model)")
        return "the config differs: " + "; ".join(parts)
    if recorded.get("weights_dtype") != current["weights_dtype"]:
        return f"the weights are {current['weights_dtype']} here, {recorded.get('weights_dtype')} in the index"
    return "same config, different weights"


def corpus_fingerprint(ids: Any) -> str:
    """A digest of a corpus's document ids (their number and the sorted ids as strings): which corpus a set of
    second-stage weights was chosen on, compared with the corpus a search or evaluation runs over. Edits of a
    document's text keep it; another corpus, or documents added or removed, change it."""
    names = sorted(str(i) for i in ids)
    digest = hashlib.sha256(f"{len(names)}\n".encode())
    for name in names:
        digest.update(name.encode())
        digest.update(b"\n")
    return digest.hexdigest()


def check_part_model(
    record: dict[str, Any], model: Any, fingerprint: Any, part: str, remedy: str, model_words: str = ""
) -> None:
    """Raise `ValueError` unless `model` has the fingerprint `record["model"]` keeps (`fingerprint(model)` computes
    it), naming the part, both models with their fingerprints (the recorded one after `model_words`, e.g. "sparse
    model "), and the `remedy`: the check of an index part's own model (the learned-sparse part's, the multi-vector
    part's) before it encodes a query."""
    recorded, current = record["model"].get("fingerprint"), fingerprint(model)
    if current != recorded:
        built = record["model"].get("name_or_path") or "(an unnamed model)"
        given = recorded_name(getattr(model.config, "name_or_path", "")) or "(an unnamed model)"
        raise ValueError(
            f"{part} was built with {model_words}{built!r} (fingerprint {str(recorded)[:12]}), not {given!r} "
            f"(fingerprint {current[:12]}): {remedy}"
        )
