"""The staging of an index build (`index_build.build_index`): the table of ids and texts written shard by shard
beside the vectors (`TextTable`), and a reused embeddings folder linked into the index (`link_folder`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa

from .lexical import LexicalBuilder


def link_folder(source: Path, target: Path) -> None:
    """`target` made anew with hard links to the files of `source` (copies where the file system refuses links)."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    for file in source.iterdir():
        if file.is_file() and not file.name.endswith(".tmp"):
            try:
                os.link(file, target / file.name)
            except OSError:
                shutil.copy2(file, target / file.name)


class TextTable:
    """Writes the ids and texts of each shard, as `encode_corpus` reads them, to an Arrow stream file (and gives the
    texts to the lexical index's builder, when there is one)."""

    def __init__(self, path: Path, lexical: LexicalBuilder | None = None) -> None:
        self.path, self.writer, self.rows, self.lexical = path, None, 0, lexical
        self.worded = 0  # texts that are not blank

    def __call__(self, shard: int, ids: list, texts: list[str]) -> None:
        if self.lexical is not None:
            self.lexical.add(texts)
        id_type = pa.string() if isinstance(ids[0], str) else pa.int64()
        table = pa.table({"id": pa.array(ids, id_type), "text": pa.array(texts, pa.string())})
        self.writer = self.writer or pa.ipc.new_stream(str(self.path), table.schema)
        self.writer.write_table(table)
        self.rows += len(ids)
        self.worded += sum(1 for text in texts if text and not text.isspace())

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.lexical is not None:
            self.lexical.close()


__all__ = ["TextTable", "link_folder"]
