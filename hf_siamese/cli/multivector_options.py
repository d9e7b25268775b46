"""A multi-vector model on the command line: `index --multi-vector-model MV` / `--add-multi-vector IDX` (the index's
multi-vector part: every document's token vectors) and `--rerank MV_DIR` of `search` / `eval` / `index --attach` (a
multi-vector model there, told from a cross-encoder by its config, reranks by MaxSim of the index's stored token
vectors). Shared by the command modules; imports none of them."""

from __future__ import annotations

import argparse
from typing import Any

from .common import load_cross_encoder, quiet_progress_bars


def add_multivector_arguments(parser: argparse.ArgumentParser) -> None:
    """`--multi-vector-model MV`, `--multi-vector-precision`, `--add-multi-vector IDX` of `index`."""
    parser.add_argument(
        "--multi-vector-model", metavar="MV",
        help="also store every document's token vectors by this multi-vector model (folder or Hub id; also a "
        "sentence-transformers MultiVectorEncoder folder): the index's multi-vector part, which 'search --index DIR "
        "--rerank MV' reranks by MaxSim; with --add-multi-vector: the model",
    )  # fmt: skip
    parser.add_argument(
        "--multi-vector-precision", choices=("float16", "int8"), default=None,
        help="how the token vectors are stored: float16 (default; 2 bytes a dimension) or int8 (1 byte a dimension "
        "and one float32 scale a token)",
    )  # fmt: skip
    parser.add_argument(
        "--add-multi-vector", metavar="DIR",
        help="add the multi-vector part (--multi-vector-model MV) to the index DIR, from its stored texts (the "
        "vectors are kept; no CORPUS or -o; a stopped run resumes; --overwrite replaces an existing part)",
    )  # fmt: skip


def load_multivector_option(path: str, device: str | None = None, option: str = "--multi-vector-model") -> Any:
    """`(model, tokenizer)` of the multi-vector model `path` given with `option`, loaded before any work: another
    kind of model there is refused in one line naming it and what is accepted."""
    from ..formats.multivector_layout import load_multivector_model

    try:
        with quiet_progress_bars():
            return load_multivector_model(path, device=device)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{option} {path}: {str(error).splitlines()[0]} (accepted: a multi-vector model folder or Hub id, "
            "siamese-multivector, or a sentence-transformers MultiVectorEncoder folder)"
        ) from None


def load_reranker_option(path: str, device: str | None = None) -> Any:
    """The reranker of `--rerank PATH`: a `MultiVectorReranker` where PATH holds a multi-vector model (MaxSim of an
    index's stored token vectors), else a cross-encoder (`common.load_cross_encoder`)."""
    from ..retrieval.fusion.multivector_rerank import MultiVectorReranker, is_multivector_model_path

    if not is_multivector_model_path(path):
        return load_cross_encoder(path, device)
    model, tokenizer = load_multivector_option(path, device, "--rerank")
    from ..retrieval.index.fingerprint import recorded_name

    return MultiVectorReranker(model, tokenizer, recorded_name(path))


def refuse_multivector_rerank(reranker: Any, path: str | None, where: str) -> None:
    """One line where a multi-vector `--rerank` is given to a search with no index (`where`: what it searches)."""
    if getattr(reranker, "kind", None) == "multi-vector":
        raise ValueError(
            f"--rerank {path} is a multi-vector model: it reranks by the token vectors an index stores, and {where} "
            f"has none. Build one ('hf-siamese index CORPUS -o DIR --multi-vector-model {path}') and search it "
            f"('search --index DIR --rerank {path}'), or rerank with a cross-encoder"
        )


def run_add_multivector(args: argparse.Namespace) -> int:
    """`index --add-multi-vector DIR --multi-vector-model MV`: the multi-vector part added to an existing index."""
    from ..retrieval.index.additions import add_multivector

    given = [flag for flag, value in (("CORPUS", args.corpus), ("-o", args.output), ("--add-lexical", args.add_lexical),
             ("--add-sparse", args.add_sparse), ("--attach", args.attach), ("--rerank", args.rerank))
             if value]  # fmt: skip
    if given or not args.multi_vector_model:
        raise ValueError(
            "--add-multi-vector DIR adds the multi-vector part of --multi-vector-model MV to an existing index: give "
            + (f"no {', '.join(given)}" if given else "--multi-vector-model MV")
        )
    model, tokenizer = load_multivector_option(args.multi_vector_model, args.device)
    index = add_multivector(
        args.add_multi_vector, model, tokenizer=tokenizer, precision=args.multi_vector_precision or "float16",
        overwrite=args.overwrite, batch_size=args.batch_size, dtype=args.dtype,
    )  # fmt: skip
    print(f"added {describe_multivector_part(index.info['multivector'])} to {args.add_multi_vector}")
    return 0


def multivector_build_options(args: argparse.Namespace) -> dict[str, Any]:
    """`build_index`'s multi-vector options of --multi-vector-model (loaded before any work) and
    --multi-vector-precision (given alone: refused)."""
    if not args.multi_vector_model:
        if args.multi_vector_precision is not None:
            raise ValueError(
                f"--multi-vector-precision {args.multi_vector_precision} sets how the token vectors of "
                "--multi-vector-model MV are stored: give --multi-vector-model MV"
            )
        return {}
    model, tokenizer = load_multivector_option(args.multi_vector_model, args.device)
    return {
        "multivector_model": model, "multivector_tokenizer": tokenizer,
        "multivector_precision": args.multi_vector_precision or "float16",
    }  # fmt: skip


def describe_multivector_part(record: dict[str, Any]) -> str:
    """One line: what an index's multi-vector part holds."""
    return (
        f"the multi-vector part ({record['count']} documents, {record['tokens']} token vectors, {record['precision']}, "
        f"{record['bytes_per_token']} bytes a token, encoded in {record.get('dtype', 'float32')}, model "
        f"{record['model']['name_or_path']})"
    )


__all__ = [
    "add_multivector_arguments",
    "describe_multivector_part",
    "load_multivector_option",
    "load_reranker_option",
    "multivector_build_options",
    "refuse_multivector_rerank",
    "run_add_multivector",
]
