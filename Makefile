# Two commands on a fresh machine: `make demo` and `make test`.
# Both create .venv when it is missing and install the package into it.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev,plots,cuda,notebooks]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m redalgebra demo

test: $(STAMP)
	$(PY) -m pytest -n 2 --durations=10   # two workers (pytest-xdist): the CI machine's two cores; slowest listed

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
