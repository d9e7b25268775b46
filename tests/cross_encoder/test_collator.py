"""CrossEncoderCollator: the three row shapes (pairs, tuples, lists), their labels and shape info, and bad rows."""

from __future__ import annotations

import pytest
import torch

from hf_siamese.cross_encoder.collator import CrossEncoderCollator, detect_pair_layout


def decoded(tokenizer, batch, index: int) -> str:
    ids = batch["input_ids"][index][batch["attention_mask"][index].bool()]
    return tokenizer.decode(ids)


def test_pairs_with_float_labels(tiny_tokenizer):
    rows = [
        {"query": "a man plays guitar", "document": "someone plays music", "label": 1.0},
        {"query": "the dog", "document": "the stock market fell today", "label": 0.25},
    ]
    batch = CrossEncoderCollator(tiny_tokenizer)(rows)
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels", "text_lengths"}
    assert batch["text_lengths"] == batch["attention_mask"].sum(dim=1).tolist()
    assert batch["input_ids"].shape[0] == 2 and batch["input_ids"].shape == batch["token_type_ids"].shape
    assert batch["labels"].dtype == torch.float32 and batch["labels"].tolist() == [1.0, 0.25]
    assert decoded(tiny_tokenizer, batch, 0) == "[CLS] a man plays guitar [SEP] someone plays music [SEP]"
    # the document sits in segment 1
    assert batch["token_type_ids"][0].tolist()[:6] == [0, 0, 0, 0, 0, 0]
    assert batch["token_type_ids"][0].tolist()[6] == 1


def test_pairs_with_class_labels_and_label2id(tiny_tokenizer):
    rows = [
        {"premise": "a man plays", "hypothesis": "a man sings", "label": "neutral"},
        {"premise": "a dog", "hypothesis": "a cat", "label": "contradiction"},
    ]
    collator = CrossEncoderCollator(tiny_tokenizer, label2id={"entailment": 0, "neutral": 1, "contradiction": 2})
    batch = collator(rows)
    assert batch["labels"].dtype == torch.long and batch["labels"].tolist() == [1, 2]
    ints = CrossEncoderCollator(tiny_tokenizer)([{"sentence1": "a", "sentence2": "b", "label": 2}])
    assert ints["labels"].dtype == torch.long


def test_tuples_are_grouped_per_row_positive_first(tiny_tokenizer):
    rows = [
        {"query": "a dog", "positive": "the dog runs", "negative_1": "a cat", "negative_2": "the bus"},
        {"query": "music", "positive": "someone sings", "negative_1": "bread", "negative_2": "rain"},
    ]
    batch = CrossEncoderCollator(tiny_tokenizer)(rows)
    assert batch["group_size"] == 3 and batch["input_ids"].shape[0] == 6 and "labels" not in batch
    texts = [decoded(tiny_tokenizer, batch, i) for i in range(6)]
    assert texts[0] == "[CLS] a dog [SEP] the dog runs [SEP]"
    assert texts[2] == "[CLS] a dog [SEP] the bus [SEP]"
    assert texts[3] == "[CLS] music [SEP] someone sings [SEP]"


def test_tuples_with_teacher_scores_and_many_negatives_in_numeric_order(tiny_tokenizer):
    columns = ["query", "positive", *[f"negative_{i}" for i in (10, 2, 1)], "scores"]
    layout = detect_pair_layout(columns)
    assert layout.documents == ("positive", "negative_1", "negative_2", "negative_10") and layout.label == "scores"
    rows = [{"anchor": "a", "positive": "b", "negative": "c", "scores": [2.0, -1.0]}] * 2
    batch = CrossEncoderCollator(tiny_tokenizer)(rows)
    assert batch["group_size"] == 2 and batch["labels"].shape == (2, 2)


def test_lists_of_unequal_length(tiny_tokenizer):
    rows = [
        {"query": "a dog", "documents": ["the dog", "a cat", "rain"], "scores": [2, 0, 0.5]},
        {"query": "music", "documents": ["someone sings"], "scores": [1.0]},
    ]
    batch = CrossEncoderCollator(tiny_tokenizer)(rows)
    assert batch["input_ids"].shape[0] == 4 and "group_size" not in batch
    assert batch["documents_mask"].tolist() == [[True, True, True], [True, False, False]]
    assert batch["labels"].tolist() == [[2.0, 0.0, 0.5], [1.0, 0.0, 0.0]]
    assert decoded(tiny_tokenizer, batch, 3) == "[CLS] music [SEP] someone sings [SEP]"


def test_list_shape_found_from_the_column_type(tiny_tokenizer):
    rows = [{"query": "a dog", "document": ["the dog", "a cat"], "label": [1.0, 0.0]}]
    batch = CrossEncoderCollator(tiny_tokenizer)(rows)
    assert batch["documents_mask"].shape == (1, 2)


def test_explicit_columns(tiny_tokenizer):
    rows = [{"q": "a dog", "d": "the dog", "y": 1.0}]
    batch = CrossEncoderCollator(tiny_tokenizer, columns={"query": "q", "document": "d", "label": "y"})(rows)
    assert batch["labels"].tolist() == [1.0]
    with pytest.raises(ValueError, match="names \\['z'\\]"):
        CrossEncoderCollator(tiny_tokenizer, columns={"query": "q", "document": "z", "label": "y"})(rows)


def test_long_documents_are_cut_not_the_query(tiny_tokenizer, caplog):
    query = "a man plays the guitar in the park"
    rows = [{"query": query, "document": "the dog runs " * 40, "label": 1.0}]
    batch = CrossEncoderCollator(tiny_tokenizer, max_length=48)(rows)
    assert batch["input_ids"].shape[1] == 48
    assert decoded(tiny_tokenizer, batch, 0).startswith(f"[CLS] {query} [SEP] the dog runs")
    assert "1 of 1 pairs" in caplog.text


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"query": 3, "document": "b", "label": 1.0},
            r"batch row 1: column 'query' holds 3 \(int\); expected a string",
        ),
        ({"query": "a", "document": None, "label": 1.0}, r"batch row 1: column 'document' holds None"),
        ({"query": "a", "document": "b", "label": None}, r"batch row 1: label column 'label' is missing"),
        ({"query": "a", "document": "b", "label": "x"}, r"batch row 1: .*label 'x'"),
    ],
)
def test_bad_pair_rows_are_named(tiny_tokenizer, row, message):
    good = {"query": "a", "document": "b", "label": 1.0}
    with pytest.raises(ValueError, match=message):
        CrossEncoderCollator(tiny_tokenizer)([good, row])


def test_pairs_without_a_label_column(tiny_tokenizer):
    with pytest.raises(ValueError, match=r"without a label column .*pairs need a label"):
        CrossEncoderCollator(tiny_tokenizer)([{"query": "a", "document": "b"}])


def test_bad_list_rows_are_named(tiny_tokenizer):
    collator = CrossEncoderCollator(tiny_tokenizer)
    with pytest.raises(ValueError, match=r"batch row 0: column 'documents' holds \[\]; expected a non-empty list"):
        collator([{"query": "a", "documents": [], "scores": []}])
    with pytest.raises(ValueError, match=r"column 'documents\[1\]' holds 7 \(int\)"):
        collator([{"query": "a", "documents": ["b", 7], "scores": [1, 0]}])
    with pytest.raises(ValueError, match=r"column 'scores' holds \[1\]; expected a list of 2 numbers"):
        collator([{"query": "a", "documents": ["b", "c"], "scores": [1]}])
    with pytest.raises(ValueError, match=r"column 'scores' holds 'high'; expected a finite number"):
        collator([{"query": "a", "documents": ["b"], "scores": ["high"]}])
    with pytest.raises(ValueError, match="no scores column"):
        collator([{"query": "a", "documents": ["b"]}])


def test_bad_tuple_rows_and_batches(tiny_tokenizer):
    collator = CrossEncoderCollator(tiny_tokenizer)
    with pytest.raises(ValueError, match=r"batch row 0: column 'negative' holds \['c'\]"):
        collator([{"query": "a", "positive": "b", "negative": ["c"]}])
    with pytest.raises(ValueError, match="batch row 1: column 'scores' holds 1 numbers, other rows 2"):
        collator([{"query": "a", "positive": "b", "scores": [1, 0]}, {"query": "a", "positive": "b", "scores": [1]}])
    with pytest.raises(ValueError, match="empty batch"):
        collator([])
    with pytest.raises(ValueError, match=r"cannot read cross-encoder rows with columns \['x', 'y'\]"):
        collator([{"x": "a", "y": "b"}])
    with pytest.raises(ValueError, match="max_length=0"):
        CrossEncoderCollator(tiny_tokenizer, max_length=0)
