"""The argparse parser of `hf-siamese`: its one-line error reporting and the list of its commands. Each command's
module defines its flags (`add_arguments`) and adds itself (`register`); the flag groups several commands share live
in `cli.arguments`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NoReturn

from . import (
    adapt,
    augment,
    distill,
    embed,
    encode,
    evaluate,
    export,
    index,
    mine,
    rerank,
    search,
    similar,
    train_flags,
    train_reranker,
)
from .common import PROG

# The commands in the order `hf-siamese --help` lists them: each adds itself to the subparsers action it is given.
COMMANDS = (
    train_flags.register,  # train (and its alias demo)
    evaluate.register,  # eval
    encode.register,
    index.register,
    embed.register,
    similar.register,  # similar and cluster
    mine.register,
    search.register,
    rerank.register,
    export.register,
    train_reranker.add_train_reranker_command,
    distill.register,
    augment.register,
    adapt.register,
)


_ADDED: list[Callable[[Any], Any]] = []


def register_command(register: Callable[[Any], Any]) -> None:
    """Add a command to `hf-siamese` from outside this package: `register(commands)` adds it to the subparsers
    action it is given (as each command module's `register` does, with `arguments.add_command`); it follows the
    built-in commands in `hf-siamese --help`."""
    if not callable(register):
        raise ValueError(f"register_command({register!r}): expected a function register(commands)")
    if register not in _ADDED:
        _ADDED.append(register)


class _Parser(argparse.ArgumentParser):
    """argparse prints the whole usage block before an error; one line naming the problem is easier to read."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message} (see '{self.prog} --help')\n")


def _package_version() -> str:
    import hf_siamese

    return hf_siamese.__version__


def build_parser() -> argparse.ArgumentParser:
    """The `hf-siamese` parser: --version, and one sub-parser per command of `COMMANDS` (each parsed command's
    `handler` runs it)."""
    parser = _Parser(
        prog=PROG,
        description="Train, evaluate and use Sentence-BERT style siamese encoders built on transformers.",
        epilog="Run 'hf-siamese COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_package_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for register in (*COMMANDS, *_ADDED):
        register(commands)
    return parser
