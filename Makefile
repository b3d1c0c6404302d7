# The project's two commands. Each builds the pinned environments first (a no-op when the pins
# are unchanged; see scripts/setup_envs.py). Extra arguments go in ARGS, e.g.
#   make run ARGS="--task cnn_cifar10 --profile tiny"
#   make test ARGS="-k runner"
# `make test` is the lint (seconds), then the smoke tier (under 20 minutes on 2 cores); `make test-matrix` the rest
# of the variant and device matrix at the tiny profile (the tests marked `matrix`), to run before committing results.
PYTHON ?= python3
MODERN := .venvs/modern/bin/python

.PHONY: envs lint run test test-matrix

envs:
	$(PYTHON) -m scripts.setup_envs

run: envs
	$(MODERN) -m scripts.run_all $(ARGS)

# ruff (pinned in the modern environment; configuration in pyproject.toml) over the Python files and the notebooks
lint: envs
	$(MODERN) -m ruff check .
	$(MODERN) -m ruff format --check .

test: lint
	$(MODERN) -m pytest $(ARGS)

test-matrix: envs
	$(MODERN) -m pytest -m matrix tests/test_notebook_runs.py $(ARGS)
