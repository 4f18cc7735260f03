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

# --- one executable (packaging/) ---------------------------------------------------------
# `make binary` builds dist/buildreport, a single file that runs without Python; `make smoke`
# runs packaging/smoke_test.py against it. PyInstaller is installed into the venv on first use.
PYINSTALLER_SPEC ?= pyinstaller>=6.10,<7

.PHONY: binary smoke

binary: $(STAMP)
	$(BIN)/python -c 'import PyInstaller' 2>/dev/null || $(BIN)/python -m pip install --quiet '$(PYINSTALLER_SPEC)'
	test -f sample_data/builds.jsonl.gz || $(BIN)/buildreport sample -o sample_data/builds.jsonl.gz
	$(BIN)/pyinstaller --noconfirm --log-level WARN --distpath dist --workpath build packaging/buildreport.spec
	@ls -l dist/buildreport

smoke: $(STAMP)
	@test -x dist/buildreport || { echo "dist/buildreport is missing: run 'make binary' first" >&2; exit 1; }
	BUILDREPORT_EXE=$(CURDIR)/dist/buildreport $(BIN)/python -m pytest packaging/smoke_test.py
