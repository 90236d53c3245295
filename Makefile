# Every target bootstraps .venv when it is missing.
# TORCH_SPEC lets other machines choose their torch (e.g. TORCH_SPEC='torch>=2.4' on a CUDA box).
PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint clean-venv

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, so no dependency can pull a different (CUDA) build
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/recall-lab demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/recall-lab bench

lint: $(STAMP)
	$(BIN)/ruff check .

clean-venv:
	rm -rf $(VENV)
