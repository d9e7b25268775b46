"""What the commands that search share: the BM25 flags read (`lexical_settings`), the --rerank options loaded
(`rerank_options`), the model that embeds an index's queries (`index_query_model`: `search --index` and
`eval --index` alike) and the hits printed (`print_hits`: `search` and `rerank`). The settings a search of an index
runs with are the library's one setup (`SearchIndex.plan`)."""

from __future__ import annotations

import argparse
from typing import Any

from .common import load_inference_model
from .multivector_options import load_reranker_option
from .sparse_options import use_recorded_sparse_model

# What each first stage without a dense model reads, as the refusal of a model flag names it.
_WITHOUT_MODEL = {"lexical": "BM25 alone, with no model", "sparse": "its sparse part, by its recorded sparse model"}


def lexical_settings(args: argparse.Namespace) -> Any:
    """The `LexicalSettings` of --language, --no-stemmer, --no-stopwords, --k1, --b over the defaults, or None where
    none of them is given (so that the library refuses them where no BM25 runs, and takes its defaults otherwise)."""
    from ..retrieval.index.lexical import LexicalSettings

    given = {name: getattr(args, name) for name in ("language", "stemmer", "stopwords", "k1", "b")}
    given = {name: value for name, value in given.items() if value is not None}
    return LexicalSettings(**given) if given else None


def rerank_options(args: argparse.Namespace, recorded: bool = False) -> tuple[Any, int | None]:
    """(the --rerank cross-encoder or multi-vector reranker, or None; --rerank-top): loaded before any embedding, so a
    wrong folder fails fast. `recorded`: the --index keeps a reranker, which --rerank-top and --first-stage-weight
    then set (--rerank-top None: the recorded depth). The cross-encoder is left as saved: --first-stage-weight goes
    to the search itself, where it asks for the two-score order (`rerank.rerank_hits`), as in `eval` and the Python
    API."""
    from ..retrieval.fusion.rerank import RERANK_TOP

    given = (("--rerank-top", args.rerank_top), ("--first-stage-weight", args.first_stage_weight))
    if getattr(args, "no_rerank", False):
        for flag, value in given:
            if value is not None:
                raise ValueError(f"--no-rerank searches the first stage alone: give no {flag}")
    if args.rerank is None:
        if not recorded:
            for flag, value in given:
                if value is not None:
                    raise ValueError(
                        f"{flag} applies with --rerank CE_DIR (the cross-encoder that reranks), or to an --index that "
                        "keeps a reranker"
                    )
            return None, RERANK_TOP
        rerank_top = args.rerank_top
    else:
        rerank_top = RERANK_TOP if args.rerank_top is None else args.rerank_top
    if rerank_top is not None and rerank_top < getattr(args, "top_k", 1):
        raise ValueError(f"--rerank-top {rerank_top} is below --top-k {args.top_k}: rerank at least the hits shown")
    reranker = None if args.rerank is None else load_reranker_option(args.rerank, args.device)
    return reranker, rerank_top


def print_hits(queries: list[str], results: list[list[dict[str, Any]]]) -> None:
    """`rank. score  [id] text` per hit under each query; reranked hits add `(first stage: #rank, score)`."""
    for query, hits in zip(queries, results, strict=True):
        print(f"\nQuery: {query}")
        for hit in hits:
            line = f"  {hit['rank']:>2}. {hit['score']:.4f}  [{hit['id']}] {hit['text']}"
            if "first_stage_rank" in hit:
                first = hit.get("first_stage_score")
                line += f"  (first stage: #{hit['first_stage_rank']}" + ("" if first is None else f", {first:.4f}")
                line += ")"
            print(line)


def index_query_model(
    args: argparse.Namespace, index: Any, first_stage: str, lists: tuple[str, ...], model_flags: dict[str, Any]
) -> tuple[Any, Any]:
    """(model, tokenizer) that embeds the queries of a search of `index` (`first_stage` reading `lists`, as
    `index.plan` gives them): the --model, else the one the index records, at the recorded max length unless
    --max-seq-length says otherwise. The lexical and sparse first stages embed nothing: (None, None), and any of
    `model_flags` (flag -> value; None / False: not given) is refused, naming it. Where the search reads the index's
    sparse part, its recorded sparse model is loaded and handed to it."""
    given = [flag for flag, value in model_flags.items() if value not in (None, False)]
    if first_stage in _WITHOUT_MODEL and given:
        raise ValueError(
            f"{', '.join(given)} {'sets' if len(given) == 1 else 'set'} the model that embeds the queries; "
            f"--first-stage {first_stage} searches {_WITHOUT_MODEL[first_stage]}"
        )
    if "sparse" in lists:
        use_recorded_sparse_model(index, args.device)
    if first_stage in _WITHOUT_MODEL:
        return None, None
    model_path = args.model or index.model_name
    if not model_path:
        raise ValueError(f"the index {args.index!r} records no model path (built from an unsaved model); pass --model")
    max_seq_length = args.max_seq_length or index.settings["max_seq_length"]
    return load_inference_model(
        model_path, args.pooling, args.normalize, max_seq_length, quantize=getattr(args, "quantize", None),
        device=args.device,
    )  # fmt: skip


__all__ = ["index_query_model", "lexical_settings", "print_hits", "rerank_options"]
