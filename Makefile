# `make demo` and `make test` are all the set-up there is: each creates or refreshes .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# llm-katan: a real third-party OpenAI-compatible server for tests/test_e2e_third_party.py. Installed
# apart (--target, its deps are ours already): its wheel ships a top-level `tests` package that would
# shadow this project's `tests` if it went into the venv's site-packages.
KATAN := $(VENV)/third-party/llm_katan

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

$(KATAN): $(STAMP)
	$(BIN)/pip install --quiet --no-deps --upgrade --target $(VENV)/third-party llm-katan==0.22.0

install: $(STAMP) $(KATAN)

demo: $(STAMP)
	$(BIN)/ultraroute demo

test: $(STAMP) $(KATAN)
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check gateway tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
