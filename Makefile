# Every target works on a fresh machine with only Python 3.11: the virtual environment is made on demand.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test bench lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	command -v redis-server >/dev/null || { command -v apt-get >/dev/null && \
		$$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y -q redis-server >/dev/null; } || \
		echo "redis-server not installed: the overlay benchmark runs without its Redis baseline"
	$(BIN)/python benchmarks/matching.py
	$(BIN)/python benchmarks/overlay.py
	$(BIN)/python benchmarks/history.py

lint: $(STAMP)
	$(BIN)/ruff check broker agents wfm tests benchmarks
	$(BIN)/ruff format --check broker agents wfm tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
