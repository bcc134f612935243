"""``wfm report`` on a ``wfm up``-sized store with Spark kept warm (issue 32: "5-13 s where the
README promises a second or two").

Makes a store like the one ``wfm up`` leaves after a day or two of the demo (``--generations``
PAYROLL-like generations of 7 JOBSTATUS each, an hour apart, default 40, compacted into the table
and its daily rollups, then ``--landing`` more still in the landing log, as between two of the
historian's compactions), starts ``wfm spark-connect`` beside it, and times a new ``wfm report
--store STORE -o json`` process until it exits, median of ``--runs``. Baseline, same run, same
server: the same process with the landing log parsed by Spark, as every report did before (a Spark
job for its columns and days, then JSON parsing in the report's own job). Both answers are checked
equal. Prints one RESULT line with the ratio and the core count.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from broker.language import Publication
from wfm.history.landing import Landing

WFM = str(Path(sys.executable).with_name("wfm"))
JOBS = ("APPL_START", "JobA", "JobB", "JobC", "JobD", "Alert", "APPL_END")


def land(store: Path, first: int, count: int, start: float) -> None:
    """``count`` generations from number ``first`` on, one an hour from ``start``."""
    with Landing(store / "landing") as landing:
        for g in range(first, first + count):
            for j, job in enumerate(JOBS):
                state = "NORUN" if job in ("JobC", "Alert") else ("FAILURE" if g % 17 == 0 else "SUCCESS")
                attributes: dict[str, str | float] = {
                    "applname": "PAYROLL",
                    "jobname": job,
                    "GID": f"G{g:05d}",
                    "status": state,
                }
                if state != "NORUN":
                    attributes["duration"] = 1.0 + (g * 7 + j) % 11
                at = start + g * 3600 + j
                landing.append(Publication("JOBSTATUS", attributes), at, "B1/agent1", f"B1/agent1/{g}-{j}@0")


def report(store: Path, spark_path: bool) -> tuple[float, str]:
    """Seconds of a new process reporting from ``store``, and its output. ``spark_path``: the
    landing log parsed by Spark (this module as the process, which forces it, then runs ``wfm``)."""
    argv = [WFM] if not spark_path else [sys.executable, __file__, "--child-spark-path"]
    start = time.perf_counter()
    done = subprocess.run(
        [*argv, "report", "--store", str(store), "-o", "json"], capture_output=True, text=True, check=True
    )
    return time.perf_counter() - start, done.stdout


def child_spark_path(args: list[str]) -> None:
    """``wfm ARGS`` with every landing log over the size read in Python: parsed by Spark."""
    from wfm.cli import main as wfm_main
    from wfm.history import store

    store.PYTHON_LANDING_BYTES = -1  # each HistoryStore takes it as its python_landing_bytes
    sys.exit(wfm_main(args))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--generations", type=int, default=40)
    parser.add_argument("--landing", type=int, default=5, help="generations left in the landing log")
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = Path(folder, "history")
        start = time.time() - (options.generations + options.landing) * 3600
        land(store, 0, options.generations, start)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = subprocess.Popen(
            [WFM, "spark-connect", "--store", str(store), "--port", str(port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None and server.stdout.readline().startswith("Spark Connect")
            subprocess.run([WFM, "compact", "--store", str(store)], capture_output=True, check=True)
            land(store, options.generations, options.landing, start)
            report(store, False)  # the server's first report: its JIT warms up
            report(store, True)
            now, before = [], []
            for _ in range(options.runs):  # interleaved, so a busy moment hurts both alike
                now.append(report(store, False))
                before.append(report(store, True))
        finally:
            server.terminate()
            server.wait(30)
    answers = {out for _, out in now + before}
    assert len(answers) == 1, "the two ways gave different reports"
    seconds = statistics.median(s for s, _ in now)
    baseline = statistics.median(s for s, _ in before)
    result = {
        "benchmark": "report-warm",
        "figure": "seconds of a new `wfm report --store STORE -o json` process, warm Spark Connect server",
        "seconds": round(seconds, 2),
        "all": [round(s, 2) for s, _ in now],
        "baseline": "the same, the landing log parsed by Spark (as before), same run and server",
        "baseline_seconds": round(baseline, 2),
        "baseline_all": [round(s, 2) for s, _ in before],
        "ratio": round(baseline / seconds, 2),
        "rows": 7 * (options.generations + options.landing),
        "landing_rows": 7 * options.landing,
        "report_rows": len(next(iter(answers)).splitlines()),
        "cores": os.cpu_count(),
        "load_average": round(os.getloadavg()[0], 1),
    }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child-spark-path"]:
        child_spark_path(sys.argv[2:])
    else:
        main()
