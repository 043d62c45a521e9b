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

# Two workers (pytest-xdist): much of the suite waits on its servers, subprocesses and Prefect rather than on a
# core, so two processes overlap the waits on a 2-core machine. A file's tests stay on one worker (--dist loadfile):
# module fixtures (a work pool with its deployments) are made once; tests/flows starts one Prefect server per worker.
# The slowest files start first (tests/conftest.py's SLOWEST_FIRST, xdist's reorder by test count off), so the two
# workers end together. Still opt-in (`make test TEST_WORKERS=2`): two-worker runs have not yet been green several
# times in a row beside other work (issue 32).
# Measured beside five other engineers' suites (a load of 1.5-19 on 2 cores): one process took 39.5 min (green); two
# workers took 11.4 min a little later at a lower load, and failed 1 test (test_shutdown's SIGTERM at a run's first
# instant, the group case: the run still Submitting 30 s after it). Its cause, a test defect, fixed since: a run an
# earlier test left crashed was put back to Scheduled by the retry automation, and the next test's worker, on the
# pool's default queue, started it beside its own (two or three engines loading Prefect at once; in a repeated case
# one run was started by four tests' workers); each test now has a work queue of its own, its end is waited for.
# With that fix, one whole two-worker run: 27.7 min, green (3109 passed), at a load of 13-24 for its first 20 min and
# 3-8 after (other engineers' suites beside it); a second, SLOWEST_FIRST updated: 14.6 min, green, at a load of 3-8.
# The 14 slowest files alone with two workers, 9.5 min, green,
# against ~16 min of theirs in the one-process run.
# Earlier: two runs of 42.6 and 24.1 min at a load of 5-15 failed 2 and 5 tests (the demo's progress line over 80
# columns, a product bug, in both; timing controls the load outran; a frozen extractor over a host's limit).
# Issue 32, a fresh machine at a load of 17-31 (seven other engineers): two workers took 72 min, 3144 passed, 35
# errors (every tests/flows test of a worker whose Prefect server did not answer within 90 s: the bound is 600 s now),
# 4 failures (test_scaleout's frozen extractor fetched a page twice; test_hostile x3: a redirect cap seen as a
# timeout at that load). Not green: still opt-in.
TEST_WORKERS ?= 0

test: lint pywb
	HARVESTER_REQUIRE_PYWB=1 $(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

bench: $(VENV)/.installed
	for b in bench/*.py; do $(PY) $$b || exit 1; done
