"""Semantic search: embed a corpus once, then find the corpus sentences closest to each query.

The corpus is a text file (one sentence per line), a pair file (its sentences are used), or by default the
sentences of the STS Benchmark test split on the Hub. Embeddings are L2-normalized, so the similarity of a query
and a sentence is a dot product and the best matches are a top-k over one matrix product.

    python examples/semantic_search.py               # Hub: all-MiniLM-L6-v2 over sentence-transformers/stsb
    python examples/semantic_search.py --model PATH --corpus ../shared/data/stsb/sts-test.csv \\
        --query "A man is playing a flute." --query "The stock market fell."
"""

from __future__ import annotations

import argparse
import os

import torch
from accelerate import PartialState
from transformers import AutoTokenizer

from hf_siamese import SiameseBertModel, distributed, load_pairs
from hf_siamese.data import open_corpus

DEFAULT_QUERIES = ["A man is playing a musical instrument.", "Someone is cooking.", "Stock prices went down."]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2", help="Hub id or folder")
    parser.add_argument("--corpus", default="sentence-transformers/stsb", help=".txt file, pair file or Hub id")
    parser.add_argument("--query", action="append", help="a query (repeatable; default: three examples)")
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--max-corpus", type=int, default=None, help="use the first N sentences only (quick runs)")
    return parser.parse_args()


def corpus_sentences(source: str) -> list[str]:
    """One sentence per line of a .txt file (read by hf_siamese's corpus reader), else the unique sentences of a pair
    dataset (file or Hub id)."""
    if source.endswith(".txt") and os.path.isfile(source):
        return [text for _, text in open_corpus(source)]
    pairs = load_pairs(source, split="test")
    return list(dict.fromkeys([*pairs["sentence1"], *pairs["sentence2"]]))  # unique, in order


def main() -> None:
    args = parse_args()
    state = PartialState()  # the device to use, also under accelerate launch (where every process searches)
    corpus = corpus_sentences(args.corpus)[: args.max_corpus]
    queries = args.query or DEFAULT_QUERIES

    # A plain encoder is wrapped with mean pooling; a saved hf-siamese model could be loaded with AutoModel.
    model = SiameseBertModel.from_encoder(args.model, pooling="mean", normalize=True).to(state.device)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    corpus_embeddings = model.encode(
        corpus, tokenizer=tokenizer, batch_size=64, show_progress_bar=state.is_main_process
    )
    query_embeddings = model.encode(queries, tokenizer=tokenizer)

    scores = model.similarity(query_embeddings, corpus_embeddings)  # (queries, corpus)
    best = torch.topk(scores, k=min(args.top_k, len(corpus)), dim=1)
    if state.is_main_process:
        print(f"Searched {len(corpus)} sentences")
        for query, values, indices in zip(queries, best.values, best.indices, strict=True):
            print(f"\nQuery: {query}")
            for score, index in zip(values.tolist(), indices.tolist(), strict=True):
                print(f"  {score:.3f}  {corpus[index]}")
    getattr(distributed, "shutdown_process_group", lambda: None)()  # clean exit under accelerate launch


if __name__ == "__main__":
    main()
