# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The service alone for the demo; the test tools too for everything else.
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed-test

.PHONY: demo test lint clean deps wheel-smoke nix-chroots

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUN_STAMP)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP) $(RUN_STAMP)

demo: $(RUN_STAMP)
	$(BIN)/buildreport demo

# Debian packages beside Python: chromium for the browser tests, postgresql for the PostgreSQL tests (the suite
# starts its own cluster), systemd for systemd-analyze (the unit tests), curl for nixbuild-action's own token
# exchange line, wrk for the benchmark (apt-get when root).
deps:
	sh .ci/debian_deps.sh chromium nix-bin openssh-server postgresql systemd curl wrk debootstrap

# Nix 2.26 (Debian trixie) and 2.34 (sid) for the recorder tests, each in a chroot kept in
# /var/cache/buildreport-nix (BUILDREPORT_NIX_CACHE) and made again only when missing or broken (needs root).
# Elsewhere than CI a machine that cannot make them runs the tests of the host's Nix only.
nix-chroots:
	@sh .ci/nix_chroot.sh trixie sid || [ "$$CI" != true ]

test: $(STAMP)
	@sh .ci/debian_deps.sh chromium nix-bin openssh-server postgresql systemd curl debootstrap
	@$(MAKE) --no-print-directory nix-chroots
	$(BIN)/ruff check buildreport tests
	$(BIN)/python -m pytest

# The wheel as a user installs it, in a fresh virtual environment outside the checkout, running the demo.
wheel-smoke:
	PYTHON=$(PYTHON) packaging/wheel_smoke.sh

lint: $(STAMP)
	$(BIN)/ruff check buildreport tests

clean:
	rm -rf $(VENV) build dist *.egg-info

# --- one executable (packaging/) ---------------------------------------------------------
# `make binary` builds dist/buildreport, a single file that runs without Python; `make smoke`
# runs packaging/smoke_test.py against it. PyInstaller is installed into the venv on first use;
# BUILDREPORT_COMPACT=1 make binary trades start-up time for a smaller file (see the spec).
PYINSTALLER_SPEC ?= pyinstaller>=6.10,<7

.PHONY: binary smoke

binary: $(RUN_STAMP)
	$(BIN)/python -c 'import PyInstaller' 2>/dev/null || $(BIN)/python -m pip install --quiet '$(PYINSTALLER_SPEC)'
	test -f buildreport/sample_data/builds.jsonl.gz || $(BIN)/buildreport sample -o buildreport/sample_data/builds.jsonl.gz
	$(BIN)/pyinstaller --noconfirm --log-level WARN --distpath dist --workpath build packaging/buildreport.spec
	@ls -l dist/buildreport

smoke: $(STAMP)
	@test -x dist/buildreport || { echo "dist/buildreport is missing: run 'make binary' first" >&2; exit 1; }
	@# pytest's folders go to one of the run's own, removed afterwards: a run leaves nothing in /tmp.
	tmp=$$(mktemp -d) && TMPDIR="$$tmp" BUILDREPORT_EXE=$(CURDIR)/dist/buildreport $(BIN)/python -m pytest \
		--basetemp="$$tmp/pytest" packaging/smoke_test.py; status=$$?; rm -rf "$$tmp"; exit $$status

# --- benchmark (bench/) --------------------------------------------------------------------
# `make bench` generates and imports BENCH_BUILDS builds (default 1000000, or several sizes such as
# 1000000,3000000,10000000; cached in bench/data/), loads a real server with wrk, on SQLite and on a throwaway
# PostgreSQL cluster (BENCH_ENGINE=both, the default; or sqlite, postgresql), keeps each size's figures in
# bench/results/, and writes bench/report.md, bench/report.json and bench/growth.svg. Quick check:
# `BENCH_BUILDS=3000 BENCH_SECONDS=1 make bench`. wrk and postgresql are installed from Debian when missing
# and root; without wrk bench/run.py falls back to a Python client, without PostgreSQL it leaves that engine
# out (a failure under CI=true), and says so in the report.
.PHONY: bench

bench: $(STAMP)
	@command -v wrk >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1 || \
		timeout 300 apt-get install -y -qq wrk >/dev/null 2>&1 || \
		{ timeout 300 apt-get update -qq >/dev/null 2>&1 && timeout 300 apt-get install -y -qq wrk >/dev/null 2>&1; } || \
		echo "bench: could not install wrk; using the Python client" >&2
	@sh .ci/debian_deps.sh postgresql || echo "bench: could not install postgresql" >&2
	$(BIN)/python bench/run.py
