"""Model cards for siamese encoders: facts from the model, its trainer and the caller, rendered into a template.

The template is ``hf_siamese/model_cards/siamese_model_card.md`` (package data of ``hf_siamese.model_cards``): a
`string.Template` whose YAML front matter is generated here and whose sections sit between
``<!-- section: NAME -->`` and ``<!-- /section -->``. A section is rendered only when its facts are known, so a card
never holds "TBD"; a card never holds a local filesystem path either (`scrub_local_paths`).

Front matter: ``library_name: sentence-transformers``, because a saved model carries the sentence-transformers layout
(`modules.json`, ...) and ``SentenceTransformer(repo_id)`` loads it with no remote code: that is the snippet and the
listing most users of embedding models look for. The ``transformers`` tag lists it for transformers too, where
``AutoModel.from_pretrained`` loads the same embedding (the Hub adds ``custom_code`` from ``auto_map``).
``hf-siamese`` is no library the Hub knows (no snippet, no widget), so it is a tag.
"""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

import yaml

from ..storage import write_text_atomic
from .local_paths import is_hub_id, looks_like_local_path, scrub_local_paths
from .model_card_facts import (
    CardInputs,
    ModelCardFacts,
    _format_number,
    _metric_sort_key,
    card_inputs,
    collect_facts,
    eval_results_from_log_history,
    hyperparameters_from_args,
    parse_eval_metrics,
)

TEMPLATE_NAME = "siamese_model_card.md"
TEMPLATE_PACKAGE = "hf_siamese.model_cards"
_SECTION_RE = re.compile(r"<!-- section: (\w+) -->\n(.*?)<!-- /section -->\n?", re.S)
_METRIC_NAMES = {"spearman": "Spearman", "pearson": "Pearson", "mse": "MSE", "mae": "MAE"}
_POOLING_TEXT = {
    "mean": "mean of the token states (padding excluded)",
    "cls": "first token (`[CLS]`) state",
    "max": "element-wise max over the token states (padding excluded)",
    "mean_sqrt_len": "sum of the token states divided by the square root of the number of tokens",
    "weightedmean": "mean of the token states weighted by position (padding excluded)",
    "lasttoken": "state of the last token (padding excluded)",
}
_LOSS_TEXT = {
    "CosineSimilarityLoss": "mean squared error between the similarity of each pair and its gold score rescaled to "
    "[0, 1]",
    "CoSENTLoss": "CoSENT ranking loss: for every two pairs whose gold scores differ, the lower-scored pair is "
    "penalised for having the higher cosine",
    "SoftmaxLoss": "cross-entropy of a softmax classifier over the pair features (the Sentence-BERT NLI objective)",
    "MultipleNegativesRankingLoss": "in-batch negatives ranking loss: each anchor must pick its own positive among "
    "all positives (and hard negatives) of the batch",
    "CachedMultipleNegativesRankingLoss": "in-batch negatives ranking loss with gradient caching (GradCache), so the "
    "batch is larger than memory would allow",
    "MatryoshkaLoss": "the base loss summed over the embedding cut to several sizes (Matryoshka representation "
    "learning), so its first dims work on their own",
    "AnglELoss": "AnglE ranking loss (Li & Li 2023): the CoSENT objective on an angle score in complex space instead "
    "of the cosine",
    "ScoredPairsRankingLoss": "in-batch negatives ranking loss on scored pairs: each pair scoring at least a threshold "
    "must pick its own second text among those of the batch",
}


# ------------------------------------------------------------------------------------------------ rendering


def front_matter(facts: ModelCardFacts) -> dict[str, Any]:
    """The card's YAML metadata, as the Hub reads it (validated by `huggingface_hub.ModelCardData`)."""
    from huggingface_hub import EvalResult, ModelCardData

    eval_results = []
    for label, metrics in facts.eval_results.items():
        for metric, value in metrics.items():
            eval_results.append(
                EvalResult(
                    task_type="sentence-similarity",
                    task_name="Semantic Similarity",
                    dataset_type=label,
                    dataset_name=label,
                    metric_type=metric,
                    metric_value=value,
                    metric_name=_metric_label(metric),
                )
            )
    data = ModelCardData(
        language=facts.language or None,
        license=facts.license,
        library_name="transformers" if facts.architecture.get("sparse") else "sentence-transformers",
        pipeline_tag="sentence-similarity",
        tags=facts.tags,
        base_model=facts.base_model,
        datasets=facts.datasets or None,
        model_name=facts.title if eval_results else None,
        eval_results=eval_results or None,
    )
    return data.to_dict()


def _metric_label(metric: str) -> str:
    kind, _, similarity = metric.partition("_")
    name = _METRIC_NAMES.get(kind, kind)
    return f"{name} ({similarity})" if similarity else name


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _hub_link(repo_id: str, kind: str = "") -> str:
    prefix = f"{kind}/" if kind else ""
    return f"[{repo_id}](https://huggingface.co/{prefix}{repo_id})"


def _details_rows(facts: ModelCardFacts) -> str:
    arch = facts.architecture
    sparse = arch.get("sparse")
    kind = "sparse encoder: learned term weights" if sparse else "siamese sentence encoder"
    rows = [("Model type", f"{kind} (`{arch['model_class']}`, hf-siamese)")]
    if facts.base_model:
        rows.append(("Base model", _hub_link(facts.base_model)))
    encoder = f"`{arch['encoder_type']}`"
    if arch.get("layers"):
        encoder += f", {arch['layers']} layers"
    encoder += f", hidden size {arch['hidden_size']}"
    rows.append(("Encoder", encoder))
    if arch.get("parameters"):
        rows.append(("Parameters", _format_parameters(arch["parameters"])))
    if sparse:
        limit = f", at most {sparse['max_active_dims']} active" if sparse["max_active_dims"] else ""
        rows.append(("Output", f"{arch['embedding_size']}-wide sparse vector, one weight per vocabulary term{limit}"))
        way = "queries: a learned weight per term (no encoder); " if sparse["architecture"] == "inference_free" else ""
        rows.append(
            ("Sparse", f"`{sparse['architecture']}`: {way}{sparse['activation']} of the masked-language logits")
        )
        if sparse["head_note"]:
            rows.append(("Masked-language head", sparse["head_note"]))
    else:
        rows.append(("Output", f"{arch['embedding_size']}-dimensional sentence embedding"))
    pooling = f"`{arch['pooling']}`: {_POOLING_TEXT.get(arch['pooling'], arch['pooling'])}"
    if arch["prompts"] and not arch["include_prompt"]:
        pooling += "; prompt tokens left out"
    rows.append(("Pooling", pooling))
    for projection in arch["projections"]:
        rows.append(
            (
                "Projection",
                f"dense {projection['in_features']} -> {projection['out_features']}, {projection['activation']}"
                + ("" if projection["bias"] else ", no bias"),
            )
        )
    rows.append(("Normalization", "L2 (unit-length embeddings)" if arch["normalize"] else "none"))
    rows.append(("Similarity", _similarity_name(arch["similarity"])))
    rows.append(("Max sequence length", f"{arch['max_seq_length']} tokens (longer texts are truncated)"))
    if arch["prompts"]:
        prompts = ", ".join(f"`{name}`: `{text!r}`" for name, text in arch["prompts"].items())
        default = arch["default_prompt_name"]
        rows.append(("Prompts", prompts + (f" (default: `{default}`)" if default else "")))
    if arch["classifier_head"]:
        labels = ", ".join(f"`{label}`" for label in arch["labels"])
        features = ", ".join(f"`{f}`" for f in arch["classifier_features"])
        rows.append(("Classifier head", f"softmax over {len(arch['labels'])} labels ({labels}) on {features}"))
    if arch["cosine_affine"]:
        rows.append(("Similarity calibration", "learned `a * cos + b` for regression losses (not in the embedding)"))
    return "\n".join(f"| {_cell(name)} | {_cell(value)} |" for name, value in rows)


def _format_parameters(count: int) -> str:
    if count >= 1_000_000_000:
        return f"{count / 1e9:.1f}B"
    if count >= 1_000_000:
        return f"{count / 1e6:.1f}M"
    if count >= 1_000:
        return f"{count / 1e3:.1f}K"
    return str(count)


def _similarity_name(similarity: str) -> str:
    names = {"cosine": "cosine similarity", "dot": "dot product"}
    return names.get(similarity, f"negative {similarity} distance")


def _summary(facts: ModelCardFacts) -> str:
    arch = facts.architecture
    vector = f"{arch['embedding_size']}-dimensional {'unit-length ' if arch['normalize'] else ''}vector"
    text = (
        f"A siamese sentence encoder (Sentence-BERT) built with hf-siamese: it maps a sentence or short paragraph "
        f"to a {vector}, and the {_similarity_name(arch['similarity'])} of two vectors tells how similar the texts "
        "are. Use it for semantic search, clustering, deduplication and similarity scoring."
    )
    if arch.get("sparse"):
        text = (
            "A sparse encoder (learned term weights, SPLADE) built with hf-siamese: it maps a text to one weight per "
            f"vocabulary term ({arch['embedding_size']} terms, almost all zero), and the dot product of two vectors "
            "tells how well they match. Use it as a retrieval first stage (`hf-siamese eval` / `search --corpus`), "
            "alone or beside a dense model; `SparseSiameseModel.decode` shows a vector's terms. Load it with "
            "`AutoModel.from_pretrained` (hf-siamese installed, or `trust_remote_code=True`); the "
            "sentence-transformers layout comes from `hf_siamese.formats.sparse_layout.write_sparse_encoder`."
        )
    trained = []
    if facts.base_model:
        trained.append(f"fine-tuned from {_hub_link(facts.base_model)}")
    if facts.loss_name:
        trained.append(f"trained with `{facts.loss_name}`")
    if facts.datasets:
        trained.append("on " + ", ".join(_hub_link(d, "datasets") for d in facts.datasets))
    if trained:
        text += "\n\nThe model was " + " ".join(trained) + "."
    if arch["classifier_head"]:
        text += " It also carries a classifier head over sentence pairs."
    return text


def _training_text(facts: ModelCardFacts) -> str:
    parts = []
    data = []
    if facts.train_size is not None:
        data.append(f"{facts.train_size:,} training rows")
    if facts.train_columns:
        data.append("with columns " + ", ".join(f"`{c}`" for c in facts.train_columns))
    if facts.datasets:
        links = ", ".join(_hub_link(d, "datasets") for d in facts.datasets)
        data.append(f"from {links}" if data else links)
    if data:
        parts.append("Data: " + " ".join(data) + ".")
    if facts.data_source:
        parts.append(f"Data source: {facts.data_source.rstrip('.')}.")
    if facts.loss_name:
        loss = f"Loss: `{facts.loss_name}` (`hf_siamese.losses`)"
        description = _LOSS_TEXT.get(facts.loss_name)
        if description:
            loss += f", {description}"
        details = []
        if "score_range" in facts.loss_details:
            low, high = facts.loss_details["score_range"]
            details.append(f"gold scores range from {_format_number(low)} to {_format_number(high)}")
        if "scale" in facts.loss_details:
            details.append(f"scale {_format_number(facts.loss_details['scale'])}")
        if facts.loss_details.get("symmetric"):
            details.append("symmetric")
        if "mini_batch_size" in facts.loss_details:
            details.append(f"mini-batches of {facts.loss_details['mini_batch_size']} texts")
        if "dims" in facts.loss_details:
            details.append("dims " + ", ".join(str(d) for d in facts.loss_details["dims"]))
        if details:
            loss += " (" + "; ".join(details) + ")"
        parts.append(loss + ".")
    if facts.trained_steps:
        run = f"Training ran {facts.trained_steps:,} optimizer steps"
        if facts.trained_epochs:
            run += f" ({_format_number(round(facts.trained_epochs, 2))} epochs)"
        parts.append(run + " with `hf_siamese.SiameseTrainer` (a `transformers.Trainer`).")
    if facts.final_weights:
        parts.append(f"Final weights: {facts.final_weights.rstrip('.')}.")
    return "\n\n".join(parts)


def _evaluation_text(facts: ModelCardFacts) -> str:
    when = ""
    if facts.eval_step is not None:
        when = f" at step {facts.eval_step:,}"
        if facts.eval_epoch is not None:
            when += f" (epoch {_format_number(round(float(facts.eval_epoch), 2))})"
    return (
        f"Semantic textual similarity on the evaluation set{'s' if len(facts.eval_results) > 1 else ''}{when}: "
        "Spearman and Pearson correlation between the model's similarity of each sentence pair and its gold score "
        "(higher is better); MSE and MAE compare the similarity with the gold score rescaled to [0, 1] (lower is "
        "better)."
    )


def _evaluation_table(facts: ModelCardFacts) -> str:
    sets = list(facts.eval_results)
    metrics: list[str] = []
    for values in facts.eval_results.values():
        metrics.extend(m for m in values if m not in metrics)
    metrics.sort(key=_metric_sort_key)
    lines = ["| metric | " + " | ".join(_cell(s) for s in sets) + " |", "|---|" + "---:|" * len(sets)]
    for metric in metrics:
        cells = [f"{facts.eval_results[s][metric]:.4f}" if metric in facts.eval_results[s] else "" for s in sets]
        lines.append(f"| {_cell(_metric_label(metric))} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def load_template() -> str:
    """The card template, from the installed package data (`hf_siamese/model_cards/`)."""
    return resources.files(TEMPLATE_PACKAGE).joinpath(TEMPLATE_NAME).read_text(encoding="utf-8")


def render_model_card(facts: ModelCardFacts, template: str | None = None) -> str:
    """Render `facts` into the template; sections without facts are dropped, local paths are scrubbed."""
    arch = facts.architecture
    meta = yaml.safe_dump(front_matter(facts), sort_keys=False, allow_unicode=True).strip()
    values = {
        "front_matter": meta,
        "title": facts.title,
        "summary": _summary(facts),
        "details_rows": _details_rows(facts),
        "model_id": facts.model_id or "path/to/this/model",
        "usage_intro": ""
        if facts.model_id
        else "Replace `path/to/this/model` with the folder or Hub id that holds this model.\n\n",
        "hidden_size": arch["embedding_size"],
        "similarity_name": _similarity_name(arch["similarity"]),
        "max_seq_length": arch["max_seq_length"],
        "labels": ", ".join(f"`{label}`" for label in arch.get("labels", [])),
        "num_labels": len(arch.get("labels", [])),
        "training_text": _training_text(facts),
        "hyperparameter_rows": "\n".join(f"| {_cell(k)} | {_cell(v)} |" for k, v in facts.hyperparameters.items()),
        "evaluation_text": _evaluation_text(facts) if facts.eval_results else "",
        "evaluation_table": _evaluation_table(facts) if facts.eval_results else "",
        "version_rows": "\n".join(f"- {name}: {version}" for name, version in facts.versions.items()),
    }
    enabled = {
        "details": True,
        "usage": not arch.get("sparse"),  # its snippets are the dense model's; the summary says how to load it
        "head_usage": bool(arch["classifier_head"]),
        "training": bool(values["training_text"]),
        "hyperparameters": bool(facts.hyperparameters),
        "evaluation": bool(facts.eval_results),
        "versions": bool(facts.versions),
    }
    text = template if template is not None else load_template()

    def section(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in enabled:
            raise ValueError(f"Model card template: unknown section {name!r}; known: {sorted(enabled)}.")
        return match.group(2) if enabled[name] else ""

    text = _SECTION_RE.sub(section, text)
    text = Template(text).substitute({k: str(v) for k, v in values.items()})
    text = re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"
    return scrub_local_paths(text)


def build_model_card(model: Any, *, repo_id: str | None = None, **card_facts: Any) -> str:
    """The model card (markdown with YAML front matter) of a `SiameseBertModel`.

    The keywords besides `model` and `repo_id` (`card_facts`) are the fields of `CardInputs`; an unknown one is a
    `TypeError` that lists them.

    Args:
        model: the model; its config gives the architecture.
        repo_id: the Hub id it is pushed to (used in the usage snippets and the title).
        trainer: a `SiameseTrainer`; gives the loss, the training arguments, the train set size and the metrics of
            its last evaluation (of the best checkpoint with `load_best_model_at_end`).
        base_model: Hub id of the checkpoint it was fine-tuned from; defaults to `model.config.name_or_path`. Local
            paths are never written.
        datasets: Hub ids of the training datasets (local paths are dropped).
        license: a Hub license id, or None to leave it out.
        eval_results: metrics to report instead of the trainer's, e.g. `trainer.evaluate()` output: keys like
            `eval_spearman_cosine` or `eval_<set>_pearson_cosine` (any `spearman` / `pearson` / `mse` / `mae` key).
        training_args: `TrainingArguments` (or a dict) when there is no trainer.
        loss_name: name of the training loss when there is no trainer.
        tags, language, title: extra tags, languages (ISO codes) and a title.
        final_weights: how the saved weights were chosen after training, where that is more than the last step
            (e.g. the best epoch, a weight average, an interpolation toward the base model), as a sentence.
        data_source: where the training rows came from, as a sentence (e.g. gold pairs and a teacher's silver ones).
    """
    inputs = card_inputs("build_model_card", {"repo_id": repo_id, **card_facts})
    return render_model_card(collect_facts(model, inputs))


def write_model_card(model: Any, folder: str | os.PathLike, **card_facts: Any) -> Path:
    """Write `build_model_card(model, **card_facts)` to `folder/README.md` and return that path."""
    inputs = card_inputs("write_model_card", card_facts)
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"write_model_card: folder {str(folder)!r} does not exist; create it or save first.")
    path = folder / "README.md"
    card = render_model_card(collect_facts(model, inputs))
    write_text_atomic(path, card)  # a finished folder never holds half a card
    return path


def split_front_matter(card: str) -> tuple[dict[str, Any], str]:
    """`(metadata, markdown body)` of a card; raises ValueError when the front matter is missing or not a mapping."""
    match = re.match(r"^---\n(.*?)\n---\n", card, re.S)
    if match is None:
        raise ValueError("Model card has no YAML front matter (a leading '---' block).")
    metadata = yaml.safe_load(match.group(1))
    if not isinstance(metadata, dict):
        raise ValueError(f"Model card front matter must be a mapping, got {type(metadata).__name__}.")
    return metadata, card[match.end() :]


__all__ = [
    "CardInputs",
    "ModelCardFacts",
    "build_model_card",
    "collect_facts",
    "eval_results_from_log_history",
    "front_matter",
    "hyperparameters_from_args",
    "is_hub_id",
    "load_template",
    "looks_like_local_path",
    "parse_eval_metrics",
    "render_model_card",
    "scrub_local_paths",
    "split_front_matter",
    "write_model_card",
]
