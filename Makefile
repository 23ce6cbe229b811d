PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
JOBS   ?= auto

.PHONY: install test test-slow bench lint clean

install: $(BIN)/ncrtl

$(BIN)/ncrtl: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

test: install
	$(BIN)/pytest -n $(JOBS) tests

test-slow: install
	$(BIN)/pytest -n $(JOBS) -m slow tests

bench: install
	$(BIN)/ncrtl bench

lint: install
	$(BIN)/ncrtl lint fp

clean:
	rm -rf build .pytest_cache
