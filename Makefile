PYTHON ?= python3
export PYTHON

.PHONY: setup bench test

setup:
	bash scripts/setup_env.sh

# The main job: a demo of SimCLR, MoCo v3 and both AttentionNCE forms on Fashion-MNIST, below the
# learning regime (4m22s by `time make bench` on a quiet 2-core machine from a fresh clone,
# data conversion included), then the reference's verdicts.
bench: setup
	$(PYTHON) -m benchmarks

# Formatting (black, line length 100) and lint (ruff), then the whole suite; the fast part alone:
# $(PYTHON) -m pytest -q -m "not integration" tests
test: setup
	$(PYTHON) -m ruff check .
	$(PYTHON) -m black --check -q .
	$(PYTHON) -m pytest -q tests
