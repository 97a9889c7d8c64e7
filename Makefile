PYTHON ?= python3
export PYTHON

.PHONY: setup bench test

setup:
	bash scripts/setup_env.sh

# The main job: SimCLR, MoCo v3 and AttentionNCE side by side on Fashion-MNIST (see docs/results.md).
bench: setup
	$(PYTHON) -m benchmarks

# Formatting (black, line length 100) and lint (ruff), then the whole suite; the fast part alone:
# $(PYTHON) -m pytest -q -m "not integration" tests
test: setup
	$(PYTHON) -m ruff check .
	$(PYTHON) -m black --check -q .
	$(PYTHON) -m pytest -q tests
