"""Start-up of the command line: --version, every command's --help, and one line (no traceback) for a missing module."""

from __future__ import annotations

import importlib.metadata

import pytest

import hf_siamese
from hf_siamese import cli
from hf_siamese.cli.common import missing_module_message


def subcommands() -> list[str]:
    parser = cli.build_parser()
    (commands,) = (a for a in parser._actions if a.dest == "command")
    return sorted(commands.choices)


def test_version_matches_the_installed_metadata(capsys) -> None:
    assert cli.main(["--version"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == f"hf-siamese {hf_siamese.__version__}"
    assert importlib.metadata.version("hf-siamese") == hf_siamese.__version__


def test_every_command_has_help(capsys) -> None:
    names = subcommands()
    for expected in ("train", "eval", "encode", "index", "search", "embed", "similar", "cluster", "adapt", "augment"):
        assert expected in names
    for name in names:
        assert cli.main([name, "--help"]) == 0, name
        assert "usage: hf-siamese" in capsys.readouterr().out


def test_readme_command_table_lists_every_command() -> None:
    readme = hf_siamese.cli.__file__.rsplit("/hf_siamese/", 1)[0] + "/README.md"
    try:
        text = open(readme, encoding="utf-8").read()
    except FileNotFoundError:
        pytest.skip("no README beside the package (installed copy)")
    table = text[text.index("## Command line") :].split("\n\n")[1]
    listed = {line.split("`")[1].split()[0] for line in table.splitlines() if line.startswith("| `")}
    assert set(subcommands()) - {"demo"} <= listed, sorted(set(subcommands()) - listed)


@pytest.mark.parametrize(
    ("missing", "expected"),
    [
        ("hf_siamese.recipes", "installation of hf-siamese is incomplete"),
        ("faiss", "pip install 'hf-siamese[index]'"),
        ("yaml", "pip install pyyaml"),
    ],
)
def test_a_missing_module_at_start_up_is_one_line(monkeypatch, capsys, missing, expected) -> None:
    def broken_parser():
        raise ModuleNotFoundError(f"No module named {missing!r}", name=missing)

    monkeypatch.setattr(cli, "build_parser", broken_parser)
    monkeypatch.delenv("HF_SIAMESE_TRACEBACK", raising=False)
    assert cli.main(["--help"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("hf-siamese: error: ") and missing.split(".")[-1] in err and expected in err


def test_a_missing_optional_package_in_a_command_is_one_line(monkeypatch, capsys) -> None:
    def handler(args):
        raise ModuleNotFoundError("No module named 'onnxruntime'", name="onnxruntime")

    monkeypatch.setattr("hf_siamese.cli.encode.run_encode", handler)
    assert cli.main(["encode", "x.txt", "-o", "x.npy"]) == 1
    err = capsys.readouterr().err
    assert "pip install 'hf-siamese[onnx]'" in err and "Traceback" not in err


def test_a_module_that_fails_for_another_reason_keeps_its_message() -> None:
    message = "kmeans needs faiss: pip install x"
    assert missing_module_message(ImportError(message)) == message
