# `make demo` and `make test` are all the set-up there is: each creates or refreshes .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# llm-katan: a real third-party OpenAI-compatible server for tests/test_e2e_third_party.py. Installed
# apart (--target, its deps are ours already): its wheel ships a top-level `tests` package that would
# shadow this project's `tests` if it went into the venv's site-packages.
KATAN := $(VENV)/third-party/llm_katan
# The coding agents tests/agents runs through the gateway, pinned here (and only here): npm packages,
# installed once into their own prefix. The stamp names the versions, so changing a pin reinstalls.
CODEX_VERSION := 0.169.0
CLAUDE_CODE_VERSION := 2.1.328
AGENTS := $(VENV)/third-party/agents
AGENTS_STAMP := $(AGENTS)/.codex-$(CODEX_VERSION)-claude-code-$(CLAUDE_CODE_VERSION)
# llama-cpp-python's server for tests/test_e2e_llamacpp.py (a real llama.cpp behind the gateway), in a
# venv of its own: its server extra brings FastAPI/Starlette versions of its choosing. Compiled from
# source, portable (no -march=native: the wheel pip caches may be reused on another CPU). The first
# build takes ~7 CPU-minutes (9-10 min on two busy cores); later clean clones reuse pip's cached wheel
# (~10 s). `gguf` writes the tiny model the test makes (tests/tiny_gguf.py). The stamp names the versions.
LLAMACPP_VERSION := 0.3.36
GGUF_VERSION := 0.19.0
LLAMACPP := $(VENV)/third-party/llamacpp
LLAMACPP_STAMP := $(LLAMACPP)/.llama-cpp-python-$(LLAMACPP_VERSION)-gguf-$(GGUF_VERSION)

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

$(KATAN): $(STAMP)
	$(BIN)/pip install --quiet --no-deps --upgrade --target $(VENV)/third-party llm-katan==0.22.0

$(AGENTS_STAMP):
	command -v npm >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq \
		&& DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq nodejs npm; }
	rm -f $(AGENTS)/.codex-*
	npm install --prefix $(AGENTS) --no-save --no-audit --no-fund --loglevel=error \
		@openai/codex@$(CODEX_VERSION) @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION)
	touch $@

$(LLAMACPP_STAMP):
	rm -rf $(LLAMACPP)
	$(PYTHON) -m venv $(LLAMACPP)
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(LLAMACPP)/bin/pip install --quiet \
		'llama-cpp-python[server]==$(LLAMACPP_VERSION)' gguf==$(GGUF_VERSION)
	touch $@

install: $(STAMP) $(KATAN) $(AGENTS_STAMP) $(LLAMACPP_STAMP)

demo: $(STAMP)
	$(BIN)/ultraroute demo

test: $(STAMP) $(KATAN) $(AGENTS_STAMP) $(LLAMACPP_STAMP)
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check gateway tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
