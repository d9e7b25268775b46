"""A multi-vector model trained here (`hf-siamese train --kind multi-vector`), written in sentence-transformers'
MultiVectorEncoder layout: sentence-transformers 6.x loads it with the same token vectors, and its top-5 by MaxSim
equals `hf-siamese search --corpus` on the same texts.

    python benchmarks/multivector_st_top5.py MV_DIR [SCIFACT_DIR]   # default ../shared/data/retrieval/scifact

The first 300 abstracts of the corpus, the first 5 test claims; a temporary folder holds the written layout.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch
from sentence_transformers import MultiVectorEncoder
from sparse_st_top5 import compare_top5  # the same top-5 comparison through `hf-siamese search --corpus`

from hf_siamese import read_beir
from hf_siamese.formats.multivector_layout import load_multivector_model, write_multivector_encoder

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "retrieval" / "scifact"


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    folder = str(Path(sys.argv[1]).resolve())
    root = str(Path(sys.argv[2] if len(sys.argv) > 2 else DEFAULT).resolve())
    os.chdir(tempfile.mkdtemp(prefix="multivector_st_top5_"))
    model, tokenizer = load_multivector_model(folder)
    write_multivector_encoder(model, "st_layout", tokenizer)
    data = read_beir(root, split="test")
    docs = [data.corpus[d].replace("\n", " ") for d in list(data.corpus)[:300]]
    Path("corpus.txt").write_text("\n".join(docs) + "\n", encoding="utf-8")
    queries = [data.queries[q] for q in list(data.queries)[:5]]
    theirs = MultiVectorEncoder("st_layout", device="cpu")
    their_docs = theirs.encode_document(docs)
    their_queries = theirs.encode_query(queries)
    our_docs = model.encode(docs, tokenizer, task="document")
    our_queries = model.encode(queries, tokenizer, task="query")
    diff = max(
        float((torch.as_tensor(a) - b).abs().max())
        for a, b in zip([*their_docs, *their_queries], [*our_docs, *our_queries], strict=True)
    )
    print(f"max abs diff of the token vectors, sentence-transformers vs ours: {diff:.2e}")
    their_top = theirs.similarity(their_queries, their_docs).topk(5, dim=1).indices.tolist()
    compare_top5(queries, their_top, folder)


if __name__ == "__main__":
    main()
