"""`cross_encoder.losses.default_loss`: the one rule for a cross-encoder's loss when none is named (the trainer's and
`train-reranker`'s)."""

from __future__ import annotations

import pytest

from hf_siamese.cross_encoder.losses import LISTS, LOSSES, PAIRS, TUPLES, default_loss


def test_the_default_loss_of_each_row_shape() -> None:
    assert default_loss(TUPLES) == default_loss(LISTS) == "plistmle"
    assert default_loss(PAIRS) == "bce"  # labels not known yet: train-reranker's labelled pairs
    assert default_loss(PAIRS, labels=[0, 1, 0.5]) == "bce"
    assert default_loss(PAIRS, labels=[0.0, 3.5]) == "mse"
    assert default_loss(PAIRS, num_labels=3, labels=[0, 1, 2]) == "ce"
    assert default_loss(TUPLES, num_labels=3) == "plistmle"
    assert {default_loss(PAIRS), default_loss(TUPLES), default_loss(PAIRS, labels=[4.0])} <= set(LOSSES)
    with pytest.raises(ValueError, match="shape 'triples'"):
        default_loss("triples")
