# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench evidence evidence-fast clean gpu-check

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Strict editable mode: a tree of links under build/ that mypy follows (the default mode installs an
# import hook mypy cannot see, so a user's mypy saw every ddpsim name as Any). The tree holds the files
# there were at install time: adding or removing a module or scenario changes its folder's time, and
# that reinstalls.
EDITABLE := --config-settings editable_mode=strict
PACKAGE_DIRS := $(shell find ddpsim scenarios -type d -not -name __pycache__)

$(VENV)/.installed: pyproject.toml setup.py $(PACKAGE_DIRS) | $(BIN)/python
	$(BIN)/pip install -q -e . $(EDITABLE)
	touch $@

$(VENV)/.installed-test: pyproject.toml setup.py $(PACKAGE_DIRS) | $(BIN)/python
	$(BIN)/pip install -q -e ".[test]" $(EDITABLE)
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
	$(BIN)/python -m pytest -n 2 --dist loadfile

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

# On a GPU host (torch only, no venv needed): every CUDA path of the measurement harness, checked, in about
# 2 minutes; exit 1 names each failure in one line. Output: $(GPU_CHECK_OUT)/selfcheck.json
GPU_CHECK_OUT ?= reports/selfcheck
gpu-check:
	PYTHONPATH=$(CURDIR) $(PY) -m ddpsim.measure.selfcheck --out $(GPU_CHECK_OUT)
