PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
JOBS   ?= auto

.PHONY: install test test-slow bench lint style clean

install: $(BIN)/ncrtl

$(BIN)/ncrtl: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

# Python style: ruff's formatter and its import and pyflakes checks (seconds).
style: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

test: style
	$(BIN)/pytest -n $(JOBS) tests

test-slow: install
	$(BIN)/pytest -n $(JOBS) -m slow tests

bench: install
	$(BIN)/ncrtl bench

# The Python style, then the generated Verilog of every FP unit: verilator --lint-only -Wall
# and a Yosys synthesis without latches.
lint: style
	$(BIN)/ncrtl lint fp

clean:
	rm -rf build .pytest_cache
