# The project's two commands. Each builds the pinned environments first (a no-op when the pins
# are unchanged; see scripts/setup_envs.py). Extra arguments go in ARGS, e.g.
#   make run ARGS="--task cnn_cifar10 --profile tiny"
#   make test ARGS="-k runner"
PYTHON ?= python3
MODERN := .venvs/modern/bin/python

.PHONY: envs run test

envs:
	$(PYTHON) scripts/setup_envs.py

run: envs
	$(MODERN) scripts/run_all.py $(ARGS)

test: envs
	$(MODERN) -m pytest $(ARGS)
