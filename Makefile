# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/buildreport demo

test: $(STAMP)
	$(BIN)/ruff check buildreport tests
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check buildreport tests

clean:
	rm -rf $(VENV) build dist *.egg-info
