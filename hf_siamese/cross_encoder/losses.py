"""Training losses of a cross-encoder: each takes the model's pair logits and the collator's labels and shape info.

The contract (every loss): `loss(logits, labels=None, group_size=None, mask=None) -> scalar tensor`, where

- `logits`: `(num_pairs, num_labels)` (or `(num_pairs,)`), one row per (query, document) pair in the collator's order;
  cast to float32 (float64 stays float64) before any activation;
- `labels`: from the collator (`CrossEncoderCollator`), shaped by the data:
  pairs `(batch,)`; tuples `(batch, group_size)` / `(batch, group_size - 1)` or absent; lists `(batch, max_docs)`;
- `group_size`: for tuple rows (query, positive, negative_1..k), `1 + k`: pairs come grouped per row, positive first;
- `mask`: for list rows (query, documents, scores), `(batch, max_docs)` bool, True where a row has a document.

`shapes` names the data shapes a loss reads (`"pairs"`, `"tuples"`, `"lists"`); `CrossEncoderTrainer` refuses
the others. `needs_labels` marks a loss that cannot train without a label column (a teacher's scores, classes): rows
made from (query, positive) pairs alone have none (`cross_encoder.fit.RERANKER_LOSSES`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F

PAIRS, TUPLES, LISTS = "pairs", "tuples", "lists"


def group_scores(
    logits: torch.Tensor, group_size: int | None = None, mask: torch.Tensor | None = None, checked: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """One-output pair logits `(num_pairs, 1)` -> `(scores, valid)` of shape `(batch, n)`: `n` is `group_size` for
    tuple rows, `mask.shape[1]` for list rows (padding scores 0, `valid` False), 1 for plain pairs. `checked`: the
    mask comes from the collator of rows already checked (the trainer's), so its count is not read back to compare."""
    scores = single_scores(logits)
    if mask is not None:
        mask = mask.to(device=scores.device, dtype=torch.bool)
        if not checked and int(mask.sum()) != scores.numel():
            raise ValueError(f"mask marks {int(mask.sum())} documents but the model scored {scores.numel()} pairs")
        return scores.new_zeros(mask.shape).masked_scatter(mask, scores), mask
    size = group_size or 1
    if scores.numel() % size:
        raise ValueError(f"{scores.numel()} pair scores do not split into groups of group_size={size}")
    grid = scores.view(-1, size)
    return grid, torch.ones_like(grid, dtype=torch.bool)


def masked_mean(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean of `values` where `valid` (a boolean mask of its shape), without indexing by the mask (which reads the
    number of valid entries back from the device)."""
    return values.masked_fill(~valid, 0).sum() / valid.sum().clamp(min=1)


def single_scores(logits: torch.Tensor) -> torch.Tensor:
    """`(num_pairs, 1)` or `(num_pairs,)` logits -> float32 `(num_pairs,)`; a model with several outputs is refused."""
    if logits.dim() == 2:
        if logits.shape[1] != 1:
            raise ValueError(
                f"this loss scores pairs with one output, but the model has num_labels={logits.shape[1]}; use "
                "CrossEntropyLoss for classification, or a model with num_labels=1"
            )
        logits = logits[:, 0]
    return logits if logits.dtype == torch.float64 else logits.float()


def relevance(
    labels: torch.Tensor | None, scores: torch.Tensor, group_size: int | None, mask: torch.Tensor | None, name: str
) -> torch.Tensor:
    """Labels as a `(batch, n)` grid matching `group_scores`; tuple rows without labels count the positive (first) as 1
    and the negatives as 0."""
    if labels is None:
        if group_size is None or mask is not None:
            raise ValueError(f"{name} needs labels: a label column for pairs, a scores column for lists")
        target = torch.zeros_like(scores)
        target[:, 0] = 1.0
        return target
    labels = labels.to(device=scores.device, dtype=scores.dtype)
    if labels.dim() == 1:
        labels = labels.unsqueeze(1)
    if labels.shape != scores.shape:
        raise ValueError(f"{name}: labels of shape {tuple(labels.shape)} do not match {tuple(scores.shape)} scores")
    return labels


def with_floor(scores: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """`scores` with padding set far (1e4) below the lowest real score: it sorts last and adds exp(-1e4) = 0 to sums
    of exponentials, and unlike -inf it keeps gradients free of NaN."""
    lowest = scores.detach().masked_fill(~valid, float("inf")).amin()
    lowest = torch.where(torch.isfinite(lowest), lowest, torch.zeros_like(lowest))  # no valid score: floor at -1e4
    return torch.where(valid, scores, lowest - 1e4)


class CrossEncoderLoss:
    """Base class: see the module docstring for the contract. Subclasses set `shapes` and implement `compute`."""

    shapes: tuple[str, ...] = (PAIRS, TUPLES, LISTS)
    num_labels: str = "1"  # "1" (one score per pair) or "many" (classification)
    needs_labels: bool = False  # True: every row needs its label(s); tuples cannot stand for them (positive first)
    # Set by CrossEncoderTrainer once it has checked every training row's labels (`check_rows`): the step then reads
    # nothing back from the device to check them again.
    _rows_checked: bool = False

    def __call__(
        self,
        logits: torch.Tensor,
        labels: torch.Tensor | None = None,
        group_size: int | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.compute(logits, labels, group_size, mask)

    def compute(
        self, logits: torch.Tensor, labels: torch.Tensor | None, group_size: int | None, mask: torch.Tensor | None
    ) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def check_labels(self, labels: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Raise a ValueError naming the first label this loss cannot take (nothing to check by default)."""

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({settings})"


class BinaryCrossEntropyLoss(CrossEncoderLoss):
    """BCE between `sigmoid(score)` and a relevance label in [0, 1] (a probability or 0/1).

    Reads: pairs (query, document, label: float in [0, 1] or 0/1); lists (query, documents, scores in [0, 1]); tuples
    (query, positive, negative_1..k): the positive is 1, the negatives 0, unless a label column gives them.

    Args:
        pos_weight: weight of the positive term (> 1 makes up for many negatives per positive).
    """

    def __init__(self, pos_weight: float | None = None) -> None:
        if pos_weight is not None and (not isinstance(pos_weight, (int, float)) or not pos_weight > 0):
            raise ValueError(f"BinaryCrossEntropyLoss: pos_weight={pos_weight!r} must be a positive number or None")
        self.pos_weight = pos_weight

    def check_labels(self, labels: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        values = labels[mask] if mask is not None else labels
        bad = values[(values < 0) | (values > 1) | values.isnan()]
        if bad.numel():
            raise ValueError(
                f"BinaryCrossEntropyLoss: label {float(bad[0])!r} is outside [0, 1]; BCE takes relevance "
                "probabilities or 0/1 (scale scores first, e.g. STSb score / 5, or use MSELoss)"
            )

    def compute(self, logits, labels, group_size, mask):
        scores, valid = group_scores(logits, group_size, mask, self._rows_checked)
        target = relevance(labels, scores, group_size, mask, "BinaryCrossEntropyLoss")
        if not self._rows_checked:
            self.check_labels(target, valid)
        weight = None if self.pos_weight is None else torch.tensor(self.pos_weight, device=scores.device)
        losses = F.binary_cross_entropy_with_logits(scores, target, pos_weight=weight, reduction="none")
        return masked_mean(losses, valid)


class MultipleNegativesRankingLoss(CrossEncoderLoss):
    """Cross-entropy over each query's scores of (positive, its hard negatives): the positive should score highest.

    `loss = mean_rows(-log softmax(scale * [s_pos, s_neg_1, ..., s_neg_k])[0])` (localized contrastive estimation).

    Reads: tuples (query, positive, negative_1..k); labels are not used. Other rows' positives are NOT scored as extra
    negatives: for a cross-encoder each extra negative is one more forward pass of (query, document), so in-batch
    negatives cost `batch^2` pairs; put the negatives you want (mined hard ones, random ones) into negative columns.

    Args:
        scale: multiplies the scores before the softmax (an inverse temperature).
        activation: `None` (raw logits, the default) or `"sigmoid"` (scores in (0, 1); then use a scale such as 10).
    """

    shapes = (TUPLES,)

    def __init__(self, scale: float = 1.0, activation: str | None = None) -> None:
        if not isinstance(scale, (int, float)) or not scale > 0:
            raise ValueError(f"MultipleNegativesRankingLoss: scale={scale!r} must be a positive number")
        if activation not in (None, "sigmoid"):
            raise ValueError(f"MultipleNegativesRankingLoss: activation={activation!r}; accepted: None, 'sigmoid'")
        self.scale = scale
        self.activation = activation

    def compute(self, logits, labels, group_size, mask):
        if mask is not None or not group_size or group_size < 2:
            raise ValueError(
                f"MultipleNegativesRankingLoss needs tuple rows (query, positive, negative_1, ...) with at least one "
                f"negative; got group_size={group_size!r}{' and list rows' if mask is not None else ''}"
            )
        scores, _ = group_scores(logits, group_size)
        if self.activation == "sigmoid":
            scores = torch.sigmoid(scores)
        target = torch.zeros(scores.shape[0], dtype=torch.long, device=scores.device)
        return F.cross_entropy(self.scale * scores, target)


class LambdaLoss(CrossEncoderLoss):
    """LambdaLoss (Wang et al., CIKM 2018) with the NDCG-Loss2++ weighting scheme: a weighted pairwise logistic loss.

    Documents are sorted by the model's scores (positions `p = 1..n`); for every pair (i, j) with `label_i > label_j`:
    `loss_ij = -log2(sigmoid(sigma * (s_i - s_j)) ** w_ij)`, with gains `G = (2^label - 1) / maxDCG`, discounts
    `D(p) = log2(1 + p)` and `w_ij = mu * |1/D(|p_i - p_j|) - 1/D(|p_i - p_j| + 1)| * |G_i - G_j|` (NDCG-Loss2)
    `+ |1/D(p_i) - 1/D(p_j)| * |G_i - G_j|` (LambdaRank). The loss is the mean over those pairs of the batch.

    Reads: lists (query, documents, scores: graded or 0/1 relevance, lists may differ in length); tuples (positive 1,
    negatives 0, unless a label column gives scores).

    Args:
        mu: weight of the NDCG-Loss2 term (10 in the paper).
        sigma: scale of the score differences.
        k: only pairs with at least one document in the model's top `k` count (NDCG@k); None: all.
        eps: clamps probabilities and maxDCG away from 0.
    """

    shapes = (TUPLES, LISTS)

    def __init__(self, mu: float = 10.0, sigma: float = 1.0, k: int | None = None, eps: float = 1e-10) -> None:
        if k is not None and (not isinstance(k, int) or k < 1):
            raise ValueError(f"LambdaLoss: k={k!r} must be a positive int or None")
        self.mu, self.sigma, self.k, self.eps = mu, sigma, k, eps

    def check_labels(self, labels: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        values = labels[mask] if mask is not None else labels
        bad = values[(values < 0) | ~values.isfinite()]
        if bad.numel():
            raise ValueError(f"LambdaLoss: relevance label {float(bad[0])!r} must be a finite number >= 0")

    def compute(self, logits, labels, group_size, mask):
        scores, valid = group_scores(logits, group_size, mask, self._rows_checked)
        target = relevance(labels, scores, group_size, mask, "LambdaLoss")
        if not self._rows_checked:
            self.check_labels(target, valid)
        n = scores.shape[1]
        # Padding sorts last (scores far below the rest); its labels are -inf, so it forms no pair.
        ordered, order = with_floor(scores, valid).sort(dim=1, descending=True)
        true_by_pred = target.masked_fill(~valid, float("-inf")).gather(1, order)
        label_differences = true_by_pred[:, :, None] - true_by_pred[:, None, :]
        pairs = label_differences.isfinite() & (label_differences > 0)
        if self.k is not None:
            top = torch.arange(n, device=scores.device) < self.k
            pairs = pairs & (top[:, None] | top[None, :])
        gains_sorted = target.masked_fill(~valid, 0.0).sort(dim=1, descending=True).values
        positions = torch.arange(1, n + 1, device=scores.device, dtype=scores.dtype)
        discount = torch.log2(1.0 + positions)
        top_k = n if self.k is None else self.k
        max_dcg = ((2.0**gains_sorted - 1.0) / discount)[:, :top_k].sum(dim=1).clamp(min=self.eps)
        gain = (2.0 ** true_by_pred.clamp(min=0.0) - 1.0) / max_dcg[:, None]
        gain_diff = (gain[:, :, None] - gain[:, None, :]).abs()
        # NDCG-Loss2: delta_d = |1/D(d) - 1/D(d + 1)| for the distance d = |p_i - p_j| (d = 0, the diagonal, unused).
        distance = (positions[:, None] - positions[None, :]).abs().clamp(min=1.0)
        delta = (1.0 / torch.log2(1.0 + distance) - 1.0 / torch.log2(2.0 + distance)).abs()
        delta.fill_diagonal_(0.0)
        lambda_rank = (1.0 / discount[:, None] - 1.0 / discount[None, :]).abs()
        weights = (self.mu * delta + lambda_rank)[None] * gain_diff
        differences = (ordered[:, :, None] - ordered[:, None, :]).masked_fill(~pairs, 0.0)
        probabilities = torch.sigmoid(self.sigma * differences).clamp(min=self.eps)
        losses = -(weights * torch.log2(probabilities))
        return masked_mean(losses, pairs) + scores.sum() * 0.0  # 0, with a gradient path, when no pair counts


class PListMLELoss(CrossEncoderLoss):
    """Position-aware ListMLE (Lan et al., UAI 2014): the likelihood of the labels' ranking under a Plackett-Luce model.

    Documents sorted by label (ties keep their input order): `loss = mean_queries(-sum_i w_i (s_i - log sum_{j>=i}
    exp(s_j)))`, with position weights `w_i = 2^(n - i) - 1` (`n` documents of the query, ranks `i` from 1) normalized
    to sum to 1 per query; `weighted=False` gives plain ListMLE (`w_i = 1`).

    Reads: lists (query, documents, scores); tuples (positive first, then the negatives, unless labels are given).
    """

    shapes = (TUPLES, LISTS)

    def __init__(self, weighted: bool = True) -> None:
        self.weighted = weighted

    def compute(self, logits, labels, group_size, mask):
        scores, valid = group_scores(logits, group_size, mask, self._rows_checked)
        target = relevance(labels, scores, group_size, mask, "PListMLELoss")
        order = target.masked_fill(~valid, float("-inf")).sort(dim=1, descending=True, stable=True).indices
        ordered = with_floor(scores, valid).gather(1, order)
        kept = valid.gather(1, order)
        tail = ordered.flip(1).logcumsumexp(dim=1).flip(1)
        log_probabilities = (ordered - tail).masked_fill(~kept, 0.0)
        if self.weighted:
            count = kept.sum(dim=1, keepdim=True).to(scores.dtype)
            ranks = torch.arange(1, scores.shape[1] + 1, device=scores.device, dtype=scores.dtype)
            # 2^(n - i) - 1, rescaled by 2^-(n - 1) so long lists stay finite (the normalization cancels it).
            weights = (torch.pow(2.0, 1.0 - ranks) - torch.pow(2.0, 1.0 - count)).clamp(min=0.0) * kept
            weights = weights / weights.sum(dim=1, keepdim=True).clamp(min=torch.finfo(scores.dtype).tiny)
        else:
            weights = kept.to(scores.dtype)
        return -(weights * log_probabilities).sum(dim=1).mean()


class MarginMSELoss(CrossEncoderLoss):
    """MSE between the model's margins `s_pos - s_neg_j` and a teacher's (Hofstätter et al., 2020).

    Reads: tuples (query, positive, negative_1..k) with a label column per row holding EITHER the teacher's scores of
    (positive, negative_1..k) (`1 + k` numbers; the margins are computed here) OR the teacher's margins
    `t_pos - t_neg_j` (`k` numbers; one number when k = 1). The length tells which.
    """

    shapes = (TUPLES,)
    needs_labels = True

    def compute(self, logits, labels, group_size, mask):
        if mask is not None or not group_size or group_size < 2:
            raise ValueError(
                f"MarginMSELoss needs tuple rows (query, positive, negative...); got group_size={group_size!r}"
            )
        if labels is None:
            raise ValueError("MarginMSELoss needs teacher scores or margins in a label column of the tuple rows")
        scores, _ = group_scores(logits, group_size)
        margins = scores[:, :1] - scores[:, 1:]
        labels = labels.to(device=scores.device, dtype=scores.dtype)
        labels = labels.unsqueeze(1) if labels.dim() == 1 else labels
        if labels.shape[1] == group_size:
            labels = labels[:, :1] - labels[:, 1:]
        elif labels.shape[1] != group_size - 1:
            raise ValueError(
                f"MarginMSELoss: {labels.shape[1]} labels per row for {group_size - 1} negatives; expected the "
                f"teacher's {group_size} scores (positive, negatives) or its {group_size - 1} margins"
            )
        return F.mse_loss(margins, labels)


class MSELoss(CrossEncoderLoss):
    """MSE between the model's scores and target scores (a teacher's, for distillation).

    Reads: pairs (query, document, score); lists (query, documents, scores); tuples with a label column of `1 + k`
    scores (positive, negatives).

    Args:
        activation: `None` (compare raw logits, for a teacher's logits) or `"sigmoid"` (for targets in [0, 1]).
    """

    needs_labels = True

    def __init__(self, activation: str | None = None) -> None:
        if activation not in (None, "sigmoid"):
            raise ValueError(f"MSELoss: activation={activation!r}; accepted: None, 'sigmoid'")
        self.activation = activation

    def compute(self, logits, labels, group_size, mask):
        if labels is None:
            raise ValueError("MSELoss needs target scores: a label / scores column")
        scores, valid = group_scores(logits, group_size, mask, self._rows_checked)
        target = relevance(labels, scores, group_size, mask, "MSELoss")
        if self.activation == "sigmoid":
            scores = torch.sigmoid(scores)
        return masked_mean((scores - target).square(), valid)


class CrossEntropyLoss(CrossEncoderLoss):
    """Softmax cross-entropy over `num_labels > 1` classes (NLI and other pair classification).

    Reads: pairs (premise, hypothesis / sentence1, sentence2 / query, document, label: class id, or a string mapped
    through the model's `label2id`).
    """

    shapes = (PAIRS,)
    num_labels = "many"
    needs_labels = True

    def check_labels(self, labels: torch.Tensor, mask: torch.Tensor | None = None, classes: int | None = None) -> None:
        if labels.is_floating_point():
            raise ValueError(f"CrossEntropyLoss: label {float(labels.flatten()[0])!r} is not a class id (an int)")
        bad = labels[(labels < 0) | (labels >= classes)] if classes is not None else labels[labels < 0]
        if bad.numel():
            raise ValueError(
                f"CrossEntropyLoss: class id {int(bad[0])} is not a class of the model (num_labels={classes}: ids 0 to "
                f"{(classes or 1) - 1})"
            )

    def compute(self, logits, labels, group_size, mask):
        if labels is None or mask is not None or (group_size or 1) != 1:
            raise ValueError("CrossEntropyLoss needs (text, text, label) pair rows with a class id label")
        if logits.dim() != 2 or logits.shape[1] < 2:
            raise ValueError(
                f"CrossEntropyLoss needs a model with num_labels > 1; logits have shape {tuple(logits.shape)}"
            )
        if not self._rows_checked:
            self.check_labels(labels, classes=logits.shape[1])
        logits = logits if logits.dtype == torch.float64 else logits.float()
        return F.cross_entropy(logits, labels.to(logits.device))


LOSSES: dict[str, type[CrossEncoderLoss]] = {
    "bce": BinaryCrossEntropyLoss,
    "mnr": MultipleNegativesRankingLoss,
    "lambda": LambdaLoss,
    "plistmle": PListMLELoss,
    "margin_mse": MarginMSELoss,
    "mse": MSELoss,
    "ce": CrossEntropyLoss,
}


def default_loss(shape: str, num_labels: int = 1, labels: Iterable[Any] | None = None) -> str:
    """The name of the loss (`LOSSES`) a cross-encoder trains with when none is named, from the shape of its rows
    (`PAIRS`, `TUPLES`, `LISTS`): tuples and lists -> "plistmle" (PListMLE ranked SciFact better than LambdaLoss:
    README, training rerankers); pairs for a model with `num_labels > 1` -> "ce"; other pairs -> "bce" where the
    numeric `labels` all lie in [0, 1] (or are not known yet: None), else "mse"."""
    if shape in (TUPLES, LISTS):
        return "plistmle"
    if shape != PAIRS:
        raise ValueError(f"default_loss: shape {shape!r}; expected one of {PAIRS!r}, {TUPLES!r}, {LISTS!r}")
    if num_labels > 1:
        return "ce"
    numbers = [v for v in labels or () if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return "bce" if all(0 <= v <= 1 for v in numbers) else "mse"


def get_loss(loss: str | CrossEncoderLoss, **kwargs: Any) -> CrossEncoderLoss:
    """A loss object, or one by name: `bce`, `mnr`, `lambda`, `plistmle`, `margin_mse`, `mse`, `ce`."""
    if isinstance(loss, CrossEncoderLoss):
        return loss
    if isinstance(loss, str) and loss.lower() in LOSSES:
        return LOSSES[loss.lower()](**kwargs)
    raise ValueError(f"unknown cross-encoder loss {loss!r}; accepted: a CrossEncoderLoss or one of {sorted(LOSSES)}")
