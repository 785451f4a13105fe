# The two Quickstart commands. Both set everything up themselves (scripts/setup.sh is idempotent).
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
PYTEST_ARGS ?=

.PHONY: setup demo test test-unit test-stress lint clean bench

setup:
	scripts/setup.sh

demo: setup
	$(SUDO) .venv/bin/testbed run scenarios/quickstart.yaml

test: setup
	$(SUDO) .venv/bin/python -m pytest -q $(PYTEST_ARGS)

# The fast tier: pure tests, no root, no namespaces (seconds).
test-unit: setup
	.venv/bin/python -m pytest -q tests/unit $(PYTEST_ARGS)

# The flake hunt: the `timing`-marked tests RUNS times beside stress-ng --cpu 1, one table of
# each test's passes, failures and host-saturated xfails (scripts/test_stress.py); STRESS_ARGS
# narrows the selection (pytest arguments, e.g. a file).
RUNS ?= 3
STRESS_ARGS ?=
test-stress: setup
	$(SUDO) .venv/bin/python scripts/test_stress.py --runs $(RUNS) -- $(STRESS_ARGS)

# Style, the import layers (pyproject.toml's contracts), then types (pyright, basic mode).
lint: setup
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/lint-imports \
		&& .venv/bin/pyright

clean:
	$(SUDO) .venv/bin/testbed clean

bench: setup
	$(SUDO) .venv/bin/python benchmarks/setup_speed.py
