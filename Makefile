# Two commands do all the set-up on a fresh machine:
#   make run    install into .venv and run `solbench run --ops gemm,attention`
#   make test   install into .venv (with test extras) and run the CPU test suite
# The venv sees the system's site-packages, so a CUDA torch you already have is used as is and
# never reinstalled. Only when no torch is importable is one installed: $(TORCH) (override it).

VENV    ?= .venv
PY      := $(VENV)/bin/python
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo yes)
TORCH   ?= $(if $(HAS_GPU),torch>=2.3,torch==2.13.0)
OPS     ?= gemm,attention
ARGS    ?=

.PHONY: install run test gpu-test compile-check clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv --system-site-packages $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[test]"
	touch $@

install: $(VENV)/.installed

run: install
	$(VENV)/bin/solbench run --ops $(OPS) $(ARGS)

test: install
	$(PY) -m pytest -q -m "not gpu"

gpu-test: install
	$(PY) -m pytest -q -m gpu

compile-check: install
	$(PY) -m kernels_ext.compile_check --check-ptxas-report results/ptxas

clean:
	rm -rf $(VENV) build *.egg-info
