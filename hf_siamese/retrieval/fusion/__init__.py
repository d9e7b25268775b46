"""Putting ranked lists together: the hybrid first stage's fusion of the dense, BM25 and learned-sparse lists
(`hybrid`), and the second stage that re-scores a first stage's hits (`rerank`: a cross-encoder; `multivector_rerank`:
MaxSim of stored token vectors)."""
