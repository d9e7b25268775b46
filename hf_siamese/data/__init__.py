"""Reading data: pair files and datasets into `datasets.Dataset` columns, corpora as streams of rows (`open_corpus`,
the one corpus reader), BEIR retrieval sets, column layouts, and the demo set that ships with the package.

Imports nothing of hf_siamese outside this folder; training, retrieval and the CLI read their inputs through it.
"""

from .beir import RetrievalDataset, read_beir
from .columns import ColumnLayout, detect_layout
from .corpus_stream import open_corpus, resolve_corpus
from .readers import (
    DataFormatError,
    DatasetLoadError,
    load_demo_dataset,
    load_pairs,
    read_nli_csv,
    read_pairs_file,
    read_sts_benchmark,
)

__all__ = [
    "ColumnLayout",
    "DataFormatError",
    "DatasetLoadError",
    "RetrievalDataset",
    "detect_layout",
    "load_demo_dataset",
    "load_pairs",
    "open_corpus",
    "read_beir",
    "read_nli_csv",
    "read_pairs_file",
    "read_sts_benchmark",
    "resolve_corpus",
]
