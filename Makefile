PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
JOBS   ?= auto

.PHONY: install test test-quick test-slow bench lint style clean

install: $(BIN)/ncrtl

$(BIN)/ncrtl: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,cluster]'
	@touch $@

# Python style: ruff's formatter and its import and pyflakes checks (seconds).
style: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

# The test runs keep Python's bytecode (__pycache__, ignored by git) even where the environment
# sets PYTHONDONTWRITEBYTECODE: every pytest worker and every simulator start would otherwise
# compile the package from source again (pytest's collection: 1.7 s -> 0.6 s).
PYCACHE := PYTHONDONTWRITEBYTECODE=

# The default suite (docs/testing.md): every block built and simulated at a small geometry.
# It prints its 15 slowest tests and writes every test's seconds to build/test-durations.json
# (copy it over tests/durations.json to refresh the order tests are handed out in).
test: style
	@mkdir -p build
	$(PYCACHE) $(BIN)/pytest -n $(JOBS) --durations=15 --record-durations build/test-durations.json tests

# The edit-and-test loop: golden models, Amaranth-simulator unit tests, CLI argument checks;
# no Verilator build, lint or Yosys run (NCRTL_NO_BUILD makes one fail the test that asked).
test-quick: install
	$(PYCACHE) NCRTL_NO_BUILD=1 $(BIN)/pytest -n $(JOBS) -m 'not slow and not sim and not synth and not long' tests

# Full-size and repeated runs, and every lint and synthesis test with the whole Yosys flow.
test-slow: install
	$(PYCACHE) NCRTL_SYNTH=full $(BIN)/pytest -n $(JOBS) -m 'slow or synth' tests

bench: install
	$(BIN)/ncrtl bench

# The Python style, then the generated Verilog of every FP unit: verilator --lint-only -Wall
# and a Yosys synthesis without latches.
lint: style
	$(BIN)/ncrtl lint fp

clean:
	rm -rf build .pytest_cache
