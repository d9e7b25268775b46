"""The pipeline kept in an index: its reranker and the settings of both stages, recorded beside what built the index
(`info["pipeline"]`: index.json of a folder, the record of an engine's collection), so that `search --index IDX`,
`load_index(IDX).search(...)` and `eval --index` retrieve and rerank as recorded, with no further flags.

    {"reranker": "CE_DIR or Hub id", "reranker_fingerprint": "...", "rerank_top": 100, "first_stage_weight": 0.3,
     "stage_weights": {"dense": 0.2, "lexical": 0.1} or null, "first_stage": "hybrid", "fusion": "zscore",
     "dense_weight": 0.5}

The reranker is loaded by the cross-encoder kind's loader in the model-kind registry (`modeling.kinds`, named by
its dotted path and imported when first needed): retrieval sits below the cross-encoder package and cannot import it.
A setting given to a search wins over the record; `rerank=False` searches the first stage alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..fusion.hybrid import check_first_stage
from ..fusion.rerank import RERANK_TOP, check_first_stage_weight, check_stage_weights


def load_reranker(location: str) -> Any:
    """The reranker recorded at `location`: a multi-vector model's folder gives a `MultiVectorReranker` (MaxSim of
    an index's stored token vectors), anything else the cross-encoder kind's loader (`modeling.kinds`)."""
    from ...modeling.kinds import get_kind
    from ..fusion.multivector_rerank import MultiVectorReranker, is_multivector_model_path

    if is_multivector_model_path(location):
        return MultiVectorReranker.load(location)
    return get_kind("cross-encoder").load(location)[0]


def checked_record(record: Any, location: str) -> dict[str, Any] | None:
    """The pipeline `record` of the index at `location` (None: no pipeline), its fields checked: a record edited by
    hand is refused naming the field and what it accepts, not met later as a raw error."""
    if record is None:
        return None
    where = f"the pipeline recorded in the index {location!r}"
    if not isinstance(record, dict):
        raise ValueError(f"{where} is {record!r:.80}; expected an object (or null for none)")
    reranker = record.get("reranker")
    if not isinstance(reranker, str) or not reranker.strip():
        raise ValueError(
            f"{where}: 'reranker' is {reranker!r:.80}; expected the reranker's folder or Hub id. Record one with "
            f"'hf-siamese index --attach {location} --rerank CE_DIR', or remove the pipeline"
        )
    top = record.get("rerank_top")
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ValueError(f"{where}: 'rerank_top' is {top!r:.80}; expected a positive whole number")
    try:
        if record.get("first_stage_weight") is not None:
            check_first_stage_weight(record["first_stage_weight"])
        check_stage_weights(record.get("stage_weights"))
        check_first_stage(
            record.get("first_stage"), record.get("fusion"), record.get("dense_weight"), sparse_part=True
        )  # the index checks it has a sparse part when it searches
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    return record


def load_recorded_reranker(record: dict[str, Any], location: str) -> Any:
    """The reranker a pipeline record names, loaded and checked against the fingerprint recorded with it: a reranker
    that cannot be loaded, or was replaced since it was recorded (other weights or config), is refused naming how to
    go on (`--no-rerank`: the first stage alone; re-attaching it), never used silently."""
    name = record["reranker"]
    try:
        reranker = load_reranker(name)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"the index {location!r} reranks with {name!r}, which cannot be loaded ({str(error).splitlines()[0]}): "
            f"restore it, record another ('hf-siamese index --attach {location} --rerank CE_DIR'), or search the "
            "first stage alone (--no-rerank; rerank=False in Python)"
        ) from None
    recorded, current = record.get("reranker_fingerprint"), reranker_fingerprint(reranker)
    if recorded is not None and current is not None and recorded not in (current, reranker_fingerprint(reranker, True)):
        raise ValueError(
            f"the index {location!r} records the reranker {name!r} with fingerprint {recorded[:12]}, but the model "
            f"there now has fingerprint {current[:12]} (replaced or trained again since it was recorded): record it "
            f"again ('hf-siamese index --attach {location} --rerank {name}'), rerank with it by name (--rerank "
            f"{name}), or search the first stage alone (--no-rerank)"
        )
    return reranker


def recorded_weights(record: dict[str, Any], first_stage: str) -> tuple[float | None, dict[str, float] | None]:
    """(first_stage_weight, stage_weights) a recorded pipeline reranks `first_stage`'s hits with: its three-score
    weights over the hybrid first stage (whose hits carry each stage's score), its two-score weight over any other;
    (None, None) where it records none (the reranker's own then apply by their rule, `rerank.rerank_hits`)."""
    stages = record.get("stage_weights") if first_stage == "hybrid" else None
    return record["first_stage_weight"], stages


def reranker_fingerprint(reranker: Any, with_path: bool = False) -> str | None:
    """A digest of the reranker's config and weights (None where it has no model to digest). The config's
    `_name_or_path` (where it was loaded from: a relative path, or the absolute one the record keeps) is left out, so
    the same model has one fingerprint wherever it is loaded from; `with_path` keeps it in, as records made before
    this rule digested it."""
    model = getattr(reranker, "model", None)
    if model is None or not hasattr(model, "state_dict"):
        return None
    import hashlib

    config = model.config.to_dict()
    if not with_path:
        config.pop("_name_or_path", None)
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()


def pipeline_record(
    index: Any,
    reranker_location: str,
    reranker: Any,
    *,
    rerank_top: int = RERANK_TOP,
    first_stage_weight: float | None = None,
    first_stage: str | None = None,
    fusion: str | None = None,
    dense_weight: float | None = None,
) -> dict[str, Any]:
    """The pipeline record of `reranker` (loaded from `reranker_location`) over `index`, checked: the first-stage
    settings by the one rule and against the index (a lexical stage needs its lexical part), the depth and weight."""
    chosen = index.check_first_stage(first_stage, fusion, dense_weight)
    if hasattr(reranker, "check_index"):  # a multi-vector model: the index's part, by this model
        reranker.check_index(index)
    if isinstance(rerank_top, bool) or not isinstance(rerank_top, int) or rerank_top < 1:
        raise ValueError(f"rerank_top={rerank_top!r}; accepted: a positive int (first-stage hits reranked per query)")
    # No weight given: the reranker's own apply at search time by their rule (`rerank.rerank_hits`: on the corpus they
    # were chosen on, else the setting-free order), so the record keeps none of its own.
    weight = None if first_stage_weight is None else check_first_stage_weight(first_stage_weight)
    location = reranker_location
    if os.path.isdir(location):
        location = os.path.abspath(location)
    kind = {"reranker_kind": reranker.kind} if getattr(reranker, "kind", None) == "multi-vector" else {}
    return {
        "reranker": location,
        **kind,
        "reranker_fingerprint": reranker_fingerprint(reranker),
        "rerank_top": rerank_top,
        "first_stage_weight": weight,
        "stage_weights": None,
        "first_stage": chosen,
        "fusion": fusion,
        "dense_weight": dense_weight,
    }


def describe_pipeline(record: dict[str, Any] | None) -> str:
    """One line: what the recorded pipeline does."""
    if not record:
        return "no reranker recorded"
    stage = record["first_stage"] + (f", fusion {record['fusion']}" if record.get("fusion") else "")
    if record.get("dense_weight") is not None:
        stage += f", dense weight {record['dense_weight']}"
    stages = record.get("stage_weights")
    if stages:
        weights = f"three scores: dense weight {stages['dense']}, lexical weight {stages['lexical']}"
    elif record.get("first_stage_weight") is not None:
        weights = f"first-stage weight {record['first_stage_weight']}"
    else:
        weights = "its saved weights on the corpus they were chosen on, else reciprocal ranks of the orders"
    by = record["reranker"] + (" (MaxSim of the stored token vectors)" if record.get("reranker_kind") else "")
    return f"{stage} first stage, its top {record['rerank_top']} reranked by {by} ({weights})"


def folder_card(path: Path, info: dict[str, Any]) -> str:
    """The README.md of an index folder: what it holds and how it searches."""
    lexical = info.get("lexical")
    lines = [
        f"# Index `{path.name}`",
        "",
        "Written by hf-siamese (`hf-siamese index`); `hf-siamese search --index DIR` and `load_index(DIR)` open it.",
        "",
        f"- documents: {info['count']}, {info['dim']}-dim vectors, {info['settings']['similarity']} similarity",
        f"- model: `{info['model'].get('name_or_path')}` (fingerprint {str(info['model'].get('fingerprint'))[:12]})",
        f"- lexical part: {'BM25 ' + json.dumps(lexical['settings']) if lexical else 'none'}",
        *_multivector_line(info.get("multivector")),
        *_compact_line(info.get("compact")),
        f"- search: {describe_pipeline(info.get('pipeline'))}",
        "",
    ]
    measured = info.get("measured") or []
    if measured:
        lines += [
            "## Measured with this index (`hf-siamese eval BEIR --index DIR`)",
            "",
            "| data | split | queries | search | nDCG@10 | recall@100 | reranked nDCG@10 | date |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for entry in measured:
            reranked = entry.get("reranked ndcg@10")
            lines.append(
                f"| {entry['data']} | {entry['split']} | {entry['queries']} | {entry['search']} | "
                f"{entry['ndcg@10']:.2f} | {entry.get('recall@100', float('nan')):.2f} | "
                f"{'-' if reranked is None else f'{reranked:.2f}'} | {entry['date']} |"
            )
        lines.append("")
    return "\n".join(lines)


def _compact_line(record: dict[str, Any] | None) -> list[str]:
    """The card's line of the compact vectors (`compact.py`), where there are some."""
    if not record:
        return ["- precision: float32 (the vectors as the model returns them)"]
    return [
        f"- precision: {record['precision']} ({record['bytes_per_document']} bytes a document, float32 "
        f"{4 * record['dim']}), the best {record['rescore']} x max(top-k, 100) rescored with the float32 vectors"
        + _ivf_words(record.get("approximate"))
    ]


def _ivf_words(ivf: dict[str, Any] | None) -> str:
    """The card's words on the IVF over the compact codes, where there is one."""
    if not ivf:
        return ""
    return (
        f"; candidates through an IVF over the codes ({ivf['lists']} lists, nprobe {ivf['nprobe']}, recall@10 "
        f"{ivf['recall@10']} of the exact search's on {ivf['queries']} {ivf['measured_on']})"
    )


def _multivector_line(record: dict[str, Any] | None) -> list[str]:
    """The card's line of the multi-vector part, where there is one."""
    if not record:
        return []
    return [
        f"- multi-vector part: `{record['model'].get('name_or_path')}`, {record['tokens']} token vectors of "
        f"{record['dim']} dims, {record['precision']} ({record['bytes_per_token']} bytes a token)"
    ]


MEASURED_KEPT = 20  # measurements an index's record keeps (the latest)


def record_measurement(index: Any, data: str, split: str, search: str, metrics: dict[str, float]) -> None:
    """Keep what `eval --index` measured (nDCG@10, recall@100 of the first stage, the reranked nDCG@10, x100) in the
    index's record, and so in its card: one entry per (data, split, search), the latest `MEASURED_KEPT`."""
    import datetime

    entry = {
        "data": data,
        "split": split,
        "search": search,
        "queries": int(metrics["num_queries"]),
        "ndcg@10": round(float(metrics["ndcg@10"]), 2),
        "date": datetime.date.today().isoformat(),
    }
    if "recall@100" in metrics:
        entry["recall@100"] = round(float(metrics["recall@100"]), 2)
    if "rerank_ndcg@10" in metrics:
        entry["reranked ndcg@10"] = round(float(metrics["rerank_ndcg@10"]), 2)
    same = (data, split, search)
    kept = [e for e in index.info.get("measured") or [] if (e["data"], e["split"], e["search"]) != same]
    index.save_info(dict(index.info, measured=[*kept, entry][-MEASURED_KEPT:]))


__all__ = [
    "describe_pipeline",
    "folder_card",
    "load_reranker",
    "pipeline_record",
    "record_measurement",
]
