# Two entry points for a fresh machine: `make demo` (the main job) and `make test`.
# Both create .venv and install the package into it; torch is pinned to the local CPU wheel
# first so that resolving `torch>=2.4` never pulls a multi-GB CUDA build. transformers' and PEFT's
# common testers come from their source releases on the package index (tests/upstream.py).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH_PIN ?= torch==2.13.0

.PHONY: install demo test test-slow test-cuda test-floor bench clean

$(STAMP): pyproject.toml setup.py tests/upstream.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install $(TORCH_PIN)
	$(PY) -m pip install -e ".[dev,zh]"
	$(PY) tests/upstream.py
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/hf-plm-ext demo

test: $(STAMP)
	$(PY) -m pytest -m "not slow and not cuda" -q

test-slow: $(STAMP)
	$(PY) -m pytest -m slow -q

test-cuda: $(STAMP)
	$(PY) -m pytest -m cuda -q

# the fast tests on the lowest versions pyproject.toml admits (floors.txt), in a venv of their own
FLOOR_VENV ?= .venv-floor
test-floor:
	test -x $(FLOOR_VENV)/bin/python || $(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/python -m pip install $(TORCH_PIN)
	$(FLOOR_VENV)/bin/python -m pip install -c floors.txt -e ".[dev,zh]"
	$(FLOOR_VENV)/bin/python -m pip check
	$(FLOOR_VENV)/bin/python tests/upstream.py
	$(FLOOR_VENV)/bin/python -m pytest -m "not slow and not cuda" -q

clean:
	rm -rf $(VENV) $(FLOOR_VENV) runs build *.egg-info
