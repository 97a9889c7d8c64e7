PYTHON ?= python3
export PYTHON

.PHONY: setup bench test

setup:
	bash scripts/setup_env.sh

# The main job: SimCLR, MoCo v3 and AttentionNCE side by side on Fashion-MNIST (see docs/results.md).
bench: setup
	$(PYTHON) -m attnce_bench

test: setup
	$(PYTHON) -m pytest -q tests
