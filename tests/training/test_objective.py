"""`training.objective.choose_objective`: the loss and its options from the rows, with errors in the caller's names."""

from __future__ import annotations

import pytest
from datasets import Dataset

from hf_siamese import losses
from hf_siamese.training.objective import ROW_LOSSES, choose_objective, infer_score_range

CLI_NAMES = {"loss": "--loss", "margin_scale": "--margin-scale", "score_range": "--score-range"}


def scored(scores: list) -> Dataset:
    return Dataset.from_dict({"sentence1": ["a", "b", "c"], "sentence2": ["d", "e", "f"], "score": scores})


def test_the_rows_choose_the_loss_and_its_options() -> None:
    objective = choose_objective(scored([0.5, 4.0, 2.0]))
    assert objective.loss_name == "cosine" and isinstance(objective.loss, losses.CosineSimilarityLoss)
    assert objective.loss.score_range == (0.0, 5.0) and objective.head_kwargs == {}
    labelled = Dataset.from_dict({"premise": ["a", "b"], "hypothesis": ["c", "d"], "label": ["yes", "no"]})
    softmax = choose_objective(labelled)
    assert softmax.loss_name == "softmax" and softmax.head_kwargs == {"label2id": {"no": 0, "yes": 1}}
    ranking = choose_objective(Dataset.from_dict({"anchor": ["a"], "positive": ["b"]}), gather_across_processes=True)
    assert ranking.loss_name == "mnr" and ranking.loss.gather_across_processes is True


def test_scores_read_as_text_become_numbers() -> None:
    objective = choose_objective(scored(["0.5", "1", "0"]), loss="cosent+0.5*angle")
    assert objective.train_data["score"] == [0.5, 1.0, 0.0]
    with pytest.raises(
        ValueError, match=r"^my rows, row 2: loss cosine needs numeric scores, column 'score' holds 'x'"
    ):
        choose_objective(scored(["1", "x", "0"]), loss="cosine", source="my rows")


def test_a_python_caller_reads_the_keyword_names() -> None:
    with pytest.raises(ValueError, match=r"^margin_scale applies to loss margin_mse, not cosine$"):
        choose_objective(scored([0.1, 0.2, 0.3]), margin_scale=2.0)
    with pytest.raises(ValueError, match=r"^loss scored_mnr needs positive_threshold T: pairs scoring"):
        choose_objective(scored([0.1, 0.2, 0.3]), loss="scored_mnr")
    with pytest.raises(ValueError, match=r"^label2id applies to loss softmax, not cosine$"):
        choose_objective(scored([0.1, 0.2, 0.3]), label2id={"a": 0, "b": 1})
    with pytest.raises(ValueError, match=r"^train data: scores span 0\.1\.\.9; pass score_range LOW,HIGH$"):
        choose_objective(scored([0.1, 9.0, 3.0]))


def test_the_caller_names_its_options() -> None:
    with pytest.raises(ValueError, match=r"^--margin-scale applies to --loss margin_mse, not mnr$"):
        choose_objective(Dataset.from_dict({"anchor": ["a"], "positive": ["b"]}), margin_scale=2.0,
                         option_names=CLI_NAMES)  # fmt: skip
    with pytest.raises(ValueError, match=r"^--score-range applies to --loss cosine, not mnr$"):
        choose_objective(Dataset.from_dict({"anchor": ["a"], "positive": ["b"]}), score_range=(0, 1),
                         option_names=CLI_NAMES)  # fmt: skip
    # Options the caller does not name keep their keyword.
    with pytest.raises(ValueError, match=r"^positive_threshold applies to --loss scored_mnr, not cosine$"):
        choose_objective(scored([0.1, 0.2, 0.3]), positive_threshold=0.5, option_names=CLI_NAMES)
    with pytest.raises(ValueError, match=r"option_names: unknown option\(s\) \['lr'\]"):
        choose_objective(scored([0.1, 0.2, 0.3]), option_names={"lr": "--lr"})


def test_rows_without_a_layout_are_named_by_their_source() -> None:
    with pytest.raises(ValueError, match=r"^mine\.csv: "):
        choose_objective(Dataset.from_dict({"x": ["a"], "y": ["b"]}), source="mine.csv")


def test_the_row_losses_and_the_score_scales() -> None:
    assert ROW_LOSSES == ("cosine", "cosent", "angle", "scored_mnr", "softmax", "mnr", "margin_mse", "list_distill")
    assert infer_score_range([0.0, 1.0], "x") == (0.0, 1.0) and infer_score_range([0, 4.5], "x") == (0.0, 5.0)
    with pytest.raises(ValueError, match=r"pass --score-range LOW,HIGH"):
        infer_score_range([-1.0, 1.0], "x", "--score-range")
