"""Smaller students: a bi-encoder built from a teacher by keeping some of its encoder layers, and the teacher's
embeddings (PCA-projected for a narrower student) as the targets it learns (`hf_siamese.losses.EmbeddingMSELoss`).

Reimers & Gurevych (2020, the multilingual-distillation paper) start a student with 4 of a 12-layer teacher's layers
and distill it with MSE on the teacher's embeddings; it kept 99.4% of STSb at 2.3x the speed. `student_from_teacher`
builds that start: the teacher's configuration with fewer layers, its embeddings, the chosen layers (in the order
given), its pooling, projections, normalization, head and tokenizer, so the student embeds like the teacher from the
first step and distillation only has to close the gap the dropped layers leave.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import Any

from torch import nn


def _layer_stack(encoder: nn.Module, count: int) -> str:
    """The name of the encoder's `nn.ModuleList` of `count` transformer layers (`encoder.layer` in BERT and RoBERTa,
    `transformer.layer` in DistilBERT, ...)."""
    found = [
        name for name, module in encoder.named_modules() if isinstance(module, nn.ModuleList) and len(module) == count
    ]
    if len(found) != 1:
        raise ValueError(
            f"student_from_teacher: cannot tell the encoder's layer stack ({type(encoder).__name__}: "
            f"{len(found)} module lists of {count} layers: {found[:3]}); only encoders with one stack of "
            "num_hidden_layers layers are supported"
        )
    return found[0]


def check_layers(layers: Any, count: int) -> list[int]:
    """`layers` as a list of distinct layer indices of a `count`-layer teacher, or a `ValueError` naming them."""
    if isinstance(layers, str) or not isinstance(layers, Sequence) or not layers:
        raise ValueError(
            f"layers={layers!r}: expected a non-empty list of the teacher's layer indices (0..{count - 1})"
        )
    bad = [value for value in layers if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count]
    if bad:
        raise ValueError(
            f"layers={list(layers)!r}: {bad} not layer indices of a {count}-layer teacher (0..{count - 1})"
        )
    if len(set(layers)) != len(layers):
        raise ValueError(f"layers={list(layers)!r}: a layer is named twice")
    if list(layers) != sorted(layers):
        raise ValueError(
            f"layers={list(layers)!r}: out of order; a student keeps the teacher's layers in their order, e.g. "
            f"{sorted(layers)!r}"
        )
    return list(layers)


def spread_layers(count: int, keep: int) -> list[int]:
    """`keep` of `count` layers spread evenly, first and last included (4 of 12: 0, 4, 7, 11)."""
    if isinstance(keep, bool) or not isinstance(keep, int) or not 1 <= keep <= count:
        raise ValueError(f"keep={keep!r}: expected an int from 1 to the teacher's {count} layers")
    if keep == 1:
        return [0]
    return sorted({round(i * (count - 1) / (keep - 1)) for i in range(keep)})


def student_from_teacher(teacher: Any, layers: Sequence[int] | int) -> Any:
    """A `SiameseBertModel` with the teacher's weights but only `layers` of its encoder layers.

    Args:
        teacher: a `SiameseBertModel`.
        layers: the teacher's layer indices to keep, in order (e.g. `[0, 2, 4]`), or a count of layers to keep
            spread evenly (`spread_layers`).

    Returns:
        The student, in eval mode, with `config.encoder_config.num_hidden_layers == len(layers)` and the teacher's
        tokenizer (when it has one). Everything but the dropped layers is copied.
    """
    from ..modeling.modeling_siamese import SiameseBertModel

    if not isinstance(teacher, SiameseBertModel):
        raise ValueError(f"student_from_teacher: teacher is {type(teacher).__name__}; expected a SiameseBertModel")
    count = int(teacher.config.encoder_config.num_hidden_layers)
    if isinstance(layers, int) and not isinstance(layers, bool):
        layers = spread_layers(count, layers)
    layers = check_layers(layers, count)
    stack = _layer_stack(teacher.encoder, count)
    config = copy.deepcopy(teacher.config)
    config.encoder_config.num_hidden_layers = len(layers)
    student = SiameseBertModel(config)
    teacher_state = teacher.state_dict()
    prefix = f"encoder.{stack}."
    state = {}
    for name in student.state_dict():
        if name.startswith(prefix):
            index, rest = name[len(prefix) :].split(".", 1)
            name_in_teacher = f"{prefix}{layers[int(index)]}.{rest}"
        else:
            name_in_teacher = name
        state[name] = teacher_state[name_in_teacher].clone()
    student.load_state_dict(state)
    student.tokenizer = teacher.tokenizer
    return student.eval()


def add_projection(model: Any, width: int) -> Any:
    """A copy of the bi-encoder `model` with one more dense layer (a learned projection, newly initialized) from its
    embedding width to `width`, trained with the rest: how a student of another width learns a teacher's embeddings
    as they are (the alternative to `teacher_embeddings(..., dim=)`, which projects the teacher's by PCA instead)."""
    from ..modeling.modeling_siamese import SiameseBertModel

    if not isinstance(model, SiameseBertModel):
        raise ValueError(f"add_projection: model is {type(model).__name__}; expected a SiameseBertModel")
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"add_projection: width={width!r}; expected a positive int (the teacher's embedding width)")
    if model.config.truncate_dim is not None:
        raise ValueError(
            f"add_projection: the model truncates its embeddings to {model.config.truncate_dim} dims; a projection "
            "after the truncation is not supported"
        )
    config = copy.deepcopy(model.config)
    layer = {"in_features": int(model.config.embedding_size), "out_features": width}
    config.projections = [*config.projections, config._checked_projection(len(config.projections), layer)]
    projected = SiameseBertModel(config)
    missing, unexpected = projected.load_state_dict(model.state_dict(), strict=False)
    assert not unexpected and all(name.startswith(f"projections.{len(config.projections) - 1}.") for name in missing)
    projected.tokenizer = getattr(model, "tokenizer", None)
    return projected.train(model.training)


def pca_projection(vectors: Any, dim: int) -> tuple[Any, Any]:
    """(mean, components `(dim, width)`) of the principal components of `vectors` `(n, width)`: project with
    `(vectors - mean) @ components.T`."""
    import torch

    vectors = torch.as_tensor(vectors, dtype=torch.float64)
    width = vectors.shape[1]
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= min(width, len(vectors)):
        raise ValueError(
            f"dim={dim!r}: a PCA projection keeps 1 to {min(width, len(vectors))} dimensions here (teacher width "
            f"{width}, {len(vectors)} texts)"
        )
    mean = vectors.mean(0)
    _, _, right = torch.linalg.svd(vectors - mean, full_matrices=False)
    return mean, right[:dim]


def teacher_embeddings(
    dataset: Any,
    teacher: Any,
    *,
    source_column: str | None = None,
    column: str = "label",
    dim: int | None = None,
    batch_size: int = 32,
    show_progress_bar: bool = False,
    cache_dir: str | os.PathLike | None = None,
) -> Any:
    """`dataset` with the teacher's embedding of each row's `source_column` text (default: the first text column:
    the source of a parallel pair) in `column`, the target of `EmbeddingMSELoss`. With `dim` below the teacher's
    width, the embeddings are projected on their first `dim` principal components (fitted on these texts), so a
    narrower student can learn them.

    Args:
        dataset: a `datasets.Dataset` with one text column (`sentence` / `text`) or parallel ones (`sentence1,
            sentence2`: source, translation).
        teacher: a `SiameseBertModel` (with its tokenizer).
        cache_dir: a folder the embeddings stream to, 20,000 distinct texts a file
            (`hf_siamese.storage.score_store`): called again after a stop, only the missing files are embedded.
    """
    from ..data.columns import detect_layout

    names = list(getattr(dataset, "column_names", None) or [])
    if not names:
        raise ValueError(f"teacher_embeddings: expected a datasets.Dataset, got {type(dataset).__name__}")
    if column in names:
        raise ValueError(f"teacher_embeddings: the dataset already has a {column!r} column; name another with column=")
    source = source_column or detect_layout([*names, column]).texts[0]
    if source not in names:
        raise ValueError(f"teacher_embeddings: source_column={source!r} is not a column (columns: {names})")
    texts = list(dataset[source])
    bad = next((row for row, text in enumerate(texts) if not isinstance(text, str)), None)
    if bad is not None:
        raise ValueError(f"teacher_embeddings: row {bad}: {source!r} holds {texts[bad]!r:.60}; expected a string")
    if not callable(getattr(teacher, "encode", None)):
        raise ValueError(f"teacher_embeddings: teacher is {type(teacher).__name__}; expected a SiameseBertModel")
    unique = list(dict.fromkeys(texts))
    import torch

    from ..storage.score_store import stored_scores, teacher_id

    def embed(chunk: list[str]) -> Any:
        return teacher.encode(chunk, batch_size=batch_size, show_progress_bar=show_progress_bar, convert_to_numpy=True)

    if cache_dir is None:
        vectors = embed(unique)
    else:
        vectors = stored_scores(embed, unique, cache_dir, teacher_id=f"{teacher_id(teacher)} (embeddings)")

    vectors = torch.as_tensor(vectors, dtype=torch.float64)
    if dim is not None and dim != vectors.shape[1]:
        mean, components = pca_projection(vectors, dim)
        vectors = (vectors - mean) @ components.T
    where = {text: row for row, text in enumerate(unique)}
    return dataset.add_column(column, vectors[[where[text] for text in texts]].float().tolist())


__all__ = [
    "add_projection",
    "check_layers",
    "pca_projection",
    "spread_layers",
    "student_from_teacher",
    "teacher_embeddings",
]
