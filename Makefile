# Two entry points for a fresh machine: `make demo` (the main job) and `make test` (the whole suite).
# Both create .venv and install the project into it when it is missing or pyproject.toml changed.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

PYWB_VENV ?= .venv-pywb

.PHONY: demo test lint bench install pywb

# compileall: an editable install leaves our own modules uncompiled, and where PYTHONDONTWRITEBYTECODE is set
# every CLI run compiled ~75 of them again (~0.2 s of its fixed cost). Written once here, read by every run.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m compileall -q harvester flows migrations > /dev/null
	touch $@

install: $(VENV)/.installed

# pywb replays the WARC export in tests/test_export_replay.py. It pins redis==2.10.6 and Prefect needs redis>=6, so it
# lives in an environment of its own; the tests run it there (HARVESTER_PYWB_PYTHON names another one).
$(PYWB_VENV)/.installed:
	test -x $(PYWB_VENV)/bin/python || python3 -m venv $(PYWB_VENV)
	$(PYWB_VENV)/bin/python -m pip install -q 'pywb==2.10.0'  # the release the replay tests were written against
	touch $@

pywb: $(PYWB_VENV)/.installed

demo: $(VENV)/.installed
	$(VENV)/bin/harvester demo

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Two workers (pytest-xdist), the default: much of the suite waits on its servers, subprocesses and Prefect rather
# than on a core, so two processes overlap the waits on a 2-core machine. A file's tests stay on one worker (--dist
# loadfile): module fixtures (a work pool with its deployments) are made once; tests/flows starts one Prefect server
# per worker. The slowest files start first (tests/conftest.py's SLOWEST_FIRST, xdist's reorder by test count off), so
# the two workers end together. `make test TEST_WORKERS=0` runs the suite in one process.
# Measured in fresh clones (`.ci/run`): one process 23-27 min (quiet; 1,401-1,616 s); two workers 14.4-15.0 min beside
# other work (load 2-7), and 18.7 min beside three engineers' helpers (load 4-7), green. The failures two-worker runs
# met (a redirect race between processes, a test's work queue shared with the next test's) were product or test
# defects, each fixed with a test; the same kind of race failed a one-process run too (a lease renewal racing a
# hand-back, tests/frontier/test_liveness.py).
TEST_WORKERS ?= 2

test: lint pywb
	HARVESTER_REQUIRE_PYWB=1 $(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

bench: $(VENV)/.installed
	for b in bench/*.py; do $(PY) $$b || exit 1; done
