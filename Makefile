# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench evidence evidence-fast clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[test]"
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/ddpsim run scenarios/quickstart.yaml --out reports/quickstart
	@echo
	@echo "ddpsim is installed in $(VENV). To run it by name in this shell:"
	@echo "    source $(VENV)/bin/activate"
	@echo "    ddpsim --version"

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/step_speed.py

# docs/accuracy.md from validation/data: every stage (the cross-validations take about 80 CPU minutes), then the
# document; evidence-fast assembles it from the committed stage outputs under validation/reports only
evidence: $(VENV)/.installed
	$(BIN)/python -m validation.evidence

evidence-fast: $(VENV)/.installed
	$(BIN)/python -m validation.evidence --fast

clean:
	rm -rf $(VENV) reports build *.egg-info
