"""Teacher scores streamed to chunk files: a run stopped after some chunks resumes with only the missing ones scored;
another pair list or teacher in the same folder is refused; teacher_scores through the store equals it without."""

from __future__ import annotations

import numpy as np
import pytest
from datasets import Dataset

from hf_siamese.cross_encoder.teacher import teacher_scores
from hf_siamese.storage.score_store import stored_scores

PAIRS = [(f"q{i}", f"d{i % 4}") for i in range(10)]


class Scorer:
    def __init__(self, fail_after: int | None = None) -> None:
        self.calls: list[int] = []
        self.fail_after = fail_after

    def __call__(self, chunk):
        if self.fail_after is not None and len(self.calls) == self.fail_after:
            raise KeyboardInterrupt  # the run is stopped
        self.calls.append(len(chunk))
        return np.array([int(q[1:]) + 0.5 * int(d[1:]) for q, d in chunk], dtype=np.float32)


def test_a_stopped_run_resumes(tmp_path):
    expected = Scorer()(PAIRS)
    first = Scorer(fail_after=2)
    with pytest.raises(KeyboardInterrupt):
        stored_scores(first, PAIRS, tmp_path, teacher_id="t", chunk_size=3)
    assert first.calls == [3, 3] and len(list(tmp_path.glob("scores-*.npy"))) == 2
    assert not list(tmp_path.glob(".*partial"))
    second = Scorer()
    assert stored_scores(second, PAIRS, tmp_path, teacher_id="t", chunk_size=3) == pytest.approx(expected)
    assert second.calls == [3, 1]  # only chunks 3 and 4
    third = Scorer()
    stored_scores(third, PAIRS, tmp_path, teacher_id="t", chunk_size=3)
    assert third.calls == []


def test_a_corrupt_chunk_is_scored_again(tmp_path):
    stored_scores(Scorer(), PAIRS, tmp_path, teacher_id="t", chunk_size=4)
    (tmp_path / "scores-00001.npy").write_bytes(b"not numpy")
    again = Scorer()
    assert stored_scores(again, PAIRS, tmp_path, teacher_id="t", chunk_size=4) == pytest.approx(Scorer()(PAIRS))
    assert again.calls == [4]


@pytest.mark.parametrize(
    ("pairs", "teacher_id", "chunk_size", "differs"),
    [(PAIRS[:-1], "t", 3, "['pairs', 'fingerprint']"), (PAIRS, "other", 3, "['teacher']"), (PAIRS, "t", 5, "chunk")],
)
def test_other_pairs_or_teacher_are_refused(tmp_path, pairs, teacher_id, chunk_size, differs):
    stored_scores(Scorer(), PAIRS, tmp_path, teacher_id="t", chunk_size=3)
    with pytest.raises(ValueError, match="holds scores of other pairs or another teacher") as error:
        stored_scores(Scorer(), pairs, tmp_path, teacher_id=teacher_id, chunk_size=chunk_size)
    assert differs in str(error.value)


def test_bad_chunk_size(tmp_path):
    with pytest.raises(ValueError, match="chunk_size=0"):
        stored_scores(Scorer(), PAIRS, tmp_path, teacher_id="t", chunk_size=0)


class Teacher:
    num_labels = 1

    def predict(self, pairs, batch_size=32, show_progress_bar=False, activation=True):
        return np.array([len(a) * 10 + len(b) for a, b in pairs], dtype=np.float32)


def test_teacher_scores_through_the_store(tmp_path):
    rows = Dataset.from_dict(
        {"anchor": ["a", "bb", "a"], "positive": ["ccc", "d", "ccc"], "negative": ["e", "ff", "e"]}
    )
    plain = teacher_scores(rows, Teacher(), output="margins")
    stored = teacher_scores(rows, Teacher(), output="margins", cache_dir=tmp_path / "scores", chunk_size=2)
    assert stored["label"] == plain["label"] == [[2.0], [-1.0], [2.0]]
    assert len(list((tmp_path / "scores").glob("scores-*.npy"))) == 2  # 4 distinct pairs, 2 a chunk
