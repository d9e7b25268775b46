"""The index and its parts: building a folder index (`build`), its vectors searched exactly or through the
approximate index (`ann`, `ann_build`, `ann_chunks`, `matrix`) or at a lower precision (`compact`), its lexical
(BM25), learned-sparse and multi-vector parts, what is added once it is built (`additions`), the model fingerprint it
records and the pipeline kept in it. Where an index lives (a folder, an engine) is `retrieval.stores`."""
