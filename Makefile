# Every target works on a fresh machine with only Python 3.11: the virtual environment is made on demand.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install browser test bench lint demo demo-sites clean

install: $(STAMP)

# The modules setup.py compiles (broker/compiled.py): the install is made again when one changes,
# so the compiled build is never stale (a stale one is not loaded: broker/compiled.py).
HOT := $(shell sed -n 's/^    "\(broker\.[a-z_.]*\)",$$/\1/p' broker/compiled.py | tr . / | sed 's/$$/.py/')

$(STAMP): pyproject.toml setup.py broker/compiled.py $(HOT)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev]'
	touch $(STAMP)

# The dashboard's browser tests (-m browser) drive Debian's Chromium; without it they skip, saying so.
browser:
	@command -v chromium >/dev/null || { command -v apt-get >/dev/null && \
		as=$$( [ "$$(id -u)" = 0 ] || echo sudo -n ) && $$as apt-get update -q >/dev/null && \
		$$as apt-get install -y -q chromium chromium-driver >/dev/null; } || \
		echo "chromium not installed: the browser tests (-m browser) skip"

# In parallel (pytest-xdist), on TEST_WORKERS processes; each that runs a Spark test starts its own
# SparkSession (tests/history/conftest.py). Three on two cores: on two workers the suite kept
# the cores busy only 60 % of the time (user+sys 20 min in 17 of wall), waiting on processes, JVMs
# and timers. Not --dist loadgroup: under pytest 9, pytest-xdist 3.8
# cannot name a test by its xdist_group (it sets item._nodeid, which pytest 9 no longer reads).
# The suite runs on the build the install made: the broker's hot path compiled with mypyc where a C
# compiler was found, unless WFM_PURE=1 (setup.py); tests/test_build.py fails if another is loaded.
# Then the tests of the compiled modules run again on their pure Python (WFM_PURE=1 at run time
# loads the .py files beside the compiled ones): about a minute.
# --durations: the 25 slowest, printed at every run, to keep the suite within its 15 minutes.
TEST_WORKERS ?= 3
PURE_TESTS := tests/test_build.py tests/language tests/matching tests/routing tests/messages \
	$(wildcard tests/transport/test_codec*.py)
test: $(STAMP) browser
	WFM_EXPECT_BUILD=$$(test -f broker/_hot.digest && echo compiled || echo pure) \
		$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=25
	WFM_PURE=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) $(PURE_TESTS)

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	for server in redis-server nats-server; do \
		command -v $$server >/dev/null || { command -v apt-get >/dev/null && \
			$$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y -q $$server >/dev/null; } || \
			echo "$$server not installed: the overlay benchmark runs without it as a baseline"; \
	done
	$(BIN)/python benchmarks/matching.py
	$(BIN)/python benchmarks/regex.py
	$(BIN)/python benchmarks/signing.py
	$(BIN)/python benchmarks/web.py
	$(BIN)/python benchmarks/codec.py
	$(BIN)/python benchmarks/overlay.py
	$(BIN)/python benchmarks/composite_traffic.py --plot docs/composite_traffic.png
	$(BIN)/python benchmarks/workflows.py
	$(BIN)/python benchmarks/history.py
	$(BIN)/python benchmarks/report.py
	$(BIN)/python benchmarks/reliability.py
	$(BIN)/python benchmarks/soak.py
	$(BIN)/python benchmarks/sites.py
	$(BIN)/python benchmarks/sites_overlay.py
	$(BIN)/python benchmarks/snapshot_stream.py
	$(BIN)/python benchmarks/qos.py

lint: $(STAMP)
	$(BIN)/ruff check broker workflow_messages agents wfm tests benchmarks
	$(BIN)/ruff format --check broker workflow_messages agents wfm tests benchmarks
	$(BIN)/mypy

# The embedded default end to end: wfm up, SETTLEMENT triggered for next Friday (its Transfer waits
# for PAYROLL's JobD of the same date: the monitor shows it HELD), then PAYROLL for today and for next
# Friday, one monitor (on B3, the far end of the line) until the three generations end; then wfm up
# is stopped. The monitor subscribes before the triggers: it sees only what happens after it subscribes.
# Everything runs over TLS: the triggers and the monitor use the identity wfm up prints.
DEMO_PORT ?= 7100
demo: $(STAMP)
	@set -e; up_out=$$(mktemp); \
	$(BIN)/wfm up --port $(DEMO_PORT) > $$up_out & up=$$!; \
	trap 'kill -TERM $$up 2>/dev/null; wait $$up || true; rm -f $$up_out' EXIT; trap 'exit 130' INT TERM; \
	until grep -q '^try:' $$up_out; do kill -0 $$up 2>/dev/null || { wait $$up; exit 1; }; sleep 0.2; done; \
	cat $$up_out; \
	eval "$$(grep '^export WFM_' $$up_out)"; \
	export WFM_BROKER=socket://127.0.0.1:$(DEMO_PORT)/B1; \
	run=$$(date +%Y%m%d-%H%M%S); \
	friday=$$($(BIN)/python -c 'import datetime as d; t = d.date.today(); print(t + d.timedelta((4 - t.weekday()) % 7 or 7))'); \
	$(BIN)/wfm monitor --gid $$run-settle --gid $$run-today --gid $$run-friday --timeout 120 \
		--broker socket://127.0.0.1:$$(($(DEMO_PORT) + 2))/B3 & monitor=$$!; \
	sleep 2; \
	$(BIN)/wfm trigger SETTLEMENT --gid $$run-settle --date $$friday --param CURRENCY=USD > /dev/null; \
	sleep 2; \
	$(BIN)/wfm trigger PAYROLL --gid $$run-today --date $$(date +%F) > /dev/null; \
	$(BIN)/wfm trigger PAYROLL --gid $$run-friday --date $$friday > /dev/null; \
	wait $$monitor

# Workflows on replicated sites (docs/sites.md): wfm up with workflows/sites.txt, three sites of
# three brokers; PAYROLL triggered, then the root site's leader killed -9 while it runs; the
# monitor (on agentC's site) shows the generation end all the same, each job once.
demo-sites: $(STAMP)
	@set -e; up_out=$$(mktemp); \
	$(BIN)/wfm up --topology workflows/sites.txt --port $(DEMO_PORT) > $$up_out & up=$$!; \
	trap 'kill -TERM $$up 2>/dev/null; wait $$up || true; rm -f $$up_out' EXIT; trap 'exit 130' INT TERM; \
	until grep -q '^try:' $$up_out; do kill -0 $$up 2>/dev/null || { wait $$up; exit 1; }; sleep 0.2; done; \
	cat $$up_out; \
	eval "$$(grep '^export WFM_' $$up_out)"; \
	run=$$(date +%Y%m%d-%H%M%S); \
	$(BIN)/wfm monitor PAYROLL --gid $$run-sites --timeout 120 & monitor=$$!; \
	sleep 2; \
	leader=$$($(BIN)/wfm status -o json | $(BIN)/python -c 'import json, sys; print(json.load(sys.stdin)["site"]["member"])'); \
	$(BIN)/wfm trigger PAYROLL --gid $$run-sites --date $$(date +%F) > /dev/null; \
	pkill -KILL -f "broker --uri [^ ]*/$$leader "; \
	echo "wfm: killed $$leader, the leader of site0, with SIGKILL as PAYROLL started" >&2; \
	wait $$monitor

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis broker/_hot.digest
	find broker -name '*.so' -delete
