"""The package layout: which subpackage may import which, no import circles, and the remote-code set stays flat.

Read from the source with `ast` (every import, also those inside functions), so an import added anywhere is seen.
"""

from __future__ import annotations

import ast
from pathlib import Path

import hf_siamese

PACKAGE = Path(hf_siamese.__file__).parent

# What each part may import of hf_siamese besides itself (docs/layout.md, "Package layout").
ALLOWED = {
    "modeling": set(),
    "storage": set(),
    "data": set(),
    "metrics": set(),
    "losses": {"modeling"},
    "formats": {"modeling", "storage"},
    "retrieval": {"modeling", "data", "metrics", "storage"},
    "evaluation": {"modeling", "data", "metrics", "retrieval", "storage"},
    "training": {"modeling", "losses", "data", "metrics", "retrieval", "evaluation", "formats", "storage"},
    "cross_encoder": {
        "modeling",
        "losses",
        "data",
        "metrics",
        "retrieval",
        "evaluation",
        "formats",
        "training",
        "storage",
    },
    "recipes": {
        "modeling",
        "losses",
        "data",
        "metrics",
        "retrieval",
        "evaluation",
        "formats",
        "training",
        "cross_encoder",
        "storage",
    },
    "serving": {"modeling", "retrieval", "formats", "cross_encoder", "storage"},
    "plots": {"storage"},
    "model_cards": set(),  # the model card template (package data)
    "cli": {
        "modeling",
        "losses",
        "data",
        "metrics",
        "retrieval",
        "evaluation",
        "formats",
        "training",
        "cross_encoder",
        "recipes",
        "serving",
        "plots",
        "storage",
    },
}
# Remote code's optional hooks: the model's checkpoint methods reach the formats only inside `try: ... except
# ImportError`, so a saved folder still loads (and saves, and pushes) where hf_siamese is not installed.
OPTIONAL_HOOKS = {
    ("hf_siamese.modeling.checkpoints", "hf_siamese.formats.sentence_transformers_read"),
    ("hf_siamese.modeling.checkpoints", "hf_siamese.formats.sentence_transformers_save"),
    ("hf_siamese.modeling.checkpoints", "hf_siamese.formats.hub"),
}
REMOTE_CODE = (
    "configuration_siamese",
    "modeling_siamese",
    "pooling",
    "checkpoints",
    "weight_files",
    "encoding",
    "low_precision",
    "batching",
    "devices",
    "packing",
    "shape_buckets",
    "short_attention",
    "attention_kernels",
)

# The sparse model kind's remote code: its own files, which may import the dense set above (CSR holds a dense model).
SPARSE_REMOTE_CODE = (
    "configuration_sparse",
    "modeling_sparse",
    "sparse_csr",
    "sparse_head",
    "sparse_pooling",
    "text_encoding",
)


def module_name(path: Path) -> str:
    parts = ["hf_siamese", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> list[tuple[str, bool]]:
    """(imported hf_siamese module, inside a try that catches ImportError) for every import in `path`."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id == "ImportError" for h in node.handlers
        ):
            guarded.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            # `from pkg import x`: x may be a module of pkg (names that are not drop out of the circle search).
            targets = [f"{target}.{alias.name}" for alias in node.names]
            if node.module:
                targets.append(target)
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        found += [(t, id(node) in guarded) for t in targets if t == "hf_siamese" or t.startswith("hf_siamese.")]
    return found


def part(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def all_imports() -> dict[str, list[tuple[str, bool]]]:
    return {
        module_name(path): imported_modules(path)
        for path in sorted(PACKAGE.rglob("*.py"))
        if "demo_data" not in path.parts and "__main__" not in path.name
    }


def test_every_module_lives_in_a_known_part() -> None:
    top_level = {m for m in all_imports() if m.count(".") == 1}
    assert top_level <= {"hf_siamese.plots"} | {f"hf_siamese.{p}" for p in ALLOWED}, sorted(top_level)


def test_imports_run_one_way() -> None:
    wrong = []
    for module, targets in all_imports().items():
        source = part(module)
        if source is None:  # hf_siamese/__init__.py gathers the public API
            continue
        for target, guarded in targets:
            destination = part(target)
            if destination in (None, source) or destination in ALLOWED[source]:
                continue
            if guarded and any(m == module and (target + ".").startswith(h + ".") for m, h in OPTIONAL_HOOKS):
                continue
            wrong.append(f"{module} imports {target}")
    assert not wrong, wrong


def test_no_import_circle() -> None:
    graph = {m: {t for t, _ in targets if t != m} for m, targets in all_imports().items()}
    # A subpackage's __init__ importing its own modules is how a package re-exports, not a circle.
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in graph.get(node, ()):
            if nxt not in graph or (node.startswith(nxt + ".") and nxt != "hf_siamese"):
                continue
            if nxt == "hf_siamese":
                continue
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt) :] + [nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for module in graph:
        if module not in state:
            visit(module, [module])
    assert not cycles, cycles


def test_remote_code_set_imports_only_itself() -> None:
    for name in (*REMOTE_CODE, *SPARSE_REMOTE_CODE):
        allowed = set(REMOTE_CODE) | (set(SPARSE_REMOTE_CODE) if name in SPARSE_REMOTE_CODE else set())
        path = PACKAGE / "modeling" / f"{name}.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        relative = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level]
        assert all(n.level == 1 for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level), name
        assert set(relative) <= allowed, (name, relative)
        absolute = [
            t for t, guarded in imported_modules(path) if not guarded and not t.startswith("hf_siamese.modeling.")
        ]
        assert not absolute, (name, absolute)


# `hf_siamese.__all__` before the layout moved modules into subpackages (d32952e), plus the `distributed` module the
# examples import from the top level: all still importable there.
PUBLIC_BEFORE_LAYOUT = (
    "DataFormatError DatasetLoadError NoDuplicatesBatchSampler RetrievalDataset STS_SPEARMAN SiameseBertConfig "
    "SiameseBertModel SiameseBertOutput SiameseBertPreTrainedModel SiamesePairCollator SiameseTrainer VectorIndex "
    "WeightAveragingCallback build_index choose_interpolation evaluate_retrieval interpolate_toward "
    "interpolate_weights "
    "keep_average_if_better load_demo_dataset load_index load_pairs losses mine_hard_negatives paired_similarities "
    "parse_interpolation pool_token_states quantize read_beir read_nli_csv read_pairs_file read_sts_benchmark "
    "sts_correlations sts_metrics_from_embeddings distributed"
).split()


def test_public_api_unchanged() -> None:
    missing = [name for name in PUBLIC_BEFORE_LAYOUT if not hasattr(hf_siamese, name)]
    assert not missing, missing
    assert set(PUBLIC_BEFORE_LAYOUT) <= set(hf_siamese.__all__)
    from hf_siamese.losses import MultipleNegativesRankingLoss  # the losses stay a public subpackage

    assert hf_siamese.losses.MultipleNegativesRankingLoss is MultipleNegativesRankingLoss
