"""Where an index lives: an index folder (`folder.VectorIndex`, the default) or a store registered here (Milvus,
`milvus/`: a server, a cluster or a Milvus Lite file). Every store is a `base.SearchIndex`, so a search, an eval and
the reranker's candidates run the same code whatever it is.

The one string users give (`--index`, `-o`, `build_index(output_dir=...)`, `load_index(...)`) is parsed once, here
(`parse_location`), into a `Location`: which store claims it and the store's own parsed value, handed to the store
as it is. A store is a module with four functions, registered by name with `register_store(name, module)`:

- `claims(text: str) -> bool`: whether the text names this store (its scheme; a misspelt scheme too, so that the
  store's parse refuses it rather than a folder of that name being created);
- `parse(text: str) -> Any`: the parsed location (a `ValueError` naming the text and the accepted forms);
- `open_store(where, rescore: int | None) -> SearchIndex`: the index there, opened;
- `build_store(model, corpus, where, **options) -> SearchIndex`: `corpus` embedded by `model` into the store, with
  `build_index`'s options (the store refuses the ones it cannot keep, by name).

A new store is one module and one `register_store` call; nothing else changes (a test store joins from the test
suite). The module is imported when a location first asks for it, so a store's client library stays optional.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any

from .base import SearchIndex

FOLDER = "folder"
_STORES: dict[str, Any] = {"milvus": "hf_siamese.retrieval.stores.milvus"}
_REQUIRED = ("claims", "parse", "open_store", "build_store")


def register_store(name: str, module: str | Any) -> None:
    """Register the store `name`, implemented by `module`: a module's dotted name (imported when a location first asks
    for it), or a module or any object with the four functions the module docstring names. A registered name is
    replaced; "folder" is the built-in default."""
    if not isinstance(name, str) or not name.isidentifier() or name == FOLDER:
        raise ValueError(f"store name {name!r}: expected an identifier other than {FOLDER!r}")
    implementation = _module(module)
    missing = [function for function in _REQUIRED if not callable(getattr(implementation, function, None))]
    if missing:
        raise ValueError(
            f"store {getattr(implementation, '__name__', implementation)!r} lacks {', '.join(missing)}; "
            f"a store defines {', '.join(_REQUIRED)}"
        )
    _STORES[name] = module


def _module(module: str | Any) -> Any:
    return importlib.import_module(module) if isinstance(module, str) else module


def registered_stores() -> tuple[str, ...]:
    """The names of the stores a location may name, besides the folder."""
    return tuple(_STORES)


@dataclass(frozen=True)
class Location:
    """A parsed location: the `text` given, the `store` that claims it ("folder" or a registered name) and `where`,
    the store's own parsed value (the folder's path)."""

    text: str
    store: str
    where: Any

    @property
    def is_folder(self) -> bool:
        return self.store == FOLDER

    def implementation(self) -> Any:
        """The module of the store (a folder has none)."""
        if self.is_folder:
            raise ValueError(f"{self.text!r} is an index folder, not a store of {', '.join(_STORES)}")
        return _module(_STORES[self.store])


def parse_location(location: str | os.PathLike | Location) -> Location:
    """The one parse of a location: the store that claims it and its parsed value; any other path is a folder."""
    if isinstance(location, Location):
        return location
    if not isinstance(location, str | os.PathLike):
        raise ValueError(f"location {location!r}: expected a folder path or a store's location (e.g. milvus://...)")
    text = os.fspath(location)
    if isinstance(location, str):
        for name, module in _STORES.items():
            implementation = _module(module)
            if implementation.claims(text):
                return Location(text, name, implementation.parse(text))
    return Location(text, FOLDER, location)


def load_index(location: str | os.PathLike | Location, rescore: int | None = None) -> SearchIndex:
    """Open an index: a folder written by `build_index` (a `VectorIndex`) or a registered store's (a Milvus collection:
    `milvus://HOST:PORT/COLLECTION`, `milvus-lite:FILE.db#COLLECTION`); all search alike. `rescore`: a folder of
    compact vectors searched at that rescoring depth (`VectorIndex.rescore`)."""
    where = parse_location(location)
    if where.is_folder:
        from .folder import VectorIndex

        index = VectorIndex.load(where.where)
        index.rescore = rescore
        return index
    return where.implementation().open_store(where.where, rescore)


def build_index(
    model: Any, corpus: Any, output_dir: str | os.PathLike | Location, **options: Any
) -> SearchIndex:  # fmt: skip
    """Embed `corpus` once with `model` into the index at `output_dir` and return it opened: a folder
    (`index.build.build_folder_index`, whose docstring gives every option) or a registered store's location (its
    `build_store`; Milvus: the corpus embedded into a local folder index, then exported, `milvus.build`, with
    `engine_options`: `engine_lexical` "ours" / "milvus", `dense_index`, `dense_params`, `work_dir`)."""
    where = parse_location(output_dir)
    if where.is_folder:
        from ..index.build import build_folder_index

        if options.get("engine_options"):
            raise ValueError(f"engine_options apply to a search engine's location, not to the folder {where.text!r}")
        options.pop("engine_options", None)
        return build_folder_index(model, corpus, where.where, **options)
    return where.implementation().build_store(model, corpus, where.where, **options)


__all__ = ["FOLDER", "Location", "build_index", "load_index", "parse_location", "register_store", "registered_stores"]
