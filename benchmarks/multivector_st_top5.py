"""A multi-vector model trained here (`hf-siamese train --kind multi-vector`), written in sentence-transformers'
MultiVectorEncoder layout: sentence-transformers 6.x loads it with the same token vectors, and its top-5 by MaxSim
equals `hf-siamese search --corpus` on the same texts.

    python benchmarks/multivector_st_top5.py MV_DIR [SCIFACT_DIR]   # default ../shared/data/retrieval/scifact

The first 300 abstracts of the corpus, the first 5 test claims; a temporary folder holds the written layout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from sentence_transformers import MultiVectorEncoder

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
    same = 0
    for query, top in zip(queries, their_top, strict=True):
        command = [sys.executable, "-m", "hf_siamese.cli", "search", "--corpus", "corpus.txt", "--model", folder]
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
