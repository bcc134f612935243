"""Luigi on the workflows of ``workflows.py``, measured in the same run: a peer, not a baseline.

Luigi (Spotify's scheduler, the ``bench`` extra) runs the same shapes as wfm: a chain of 40 tasks,
and 100 diamonds of 5 tasks (A; B, C, D after A; E after all three) at once. Every task runs the
same command as a wfm job (``/bin/sh -c true``) and marks itself done with a file target, which is
how a Luigi task says it is complete. Times are from the call to ``luigi.build`` to its return,
with the local scheduler (Luigi's central scheduler adds an HTTP round trip per task); the
diamonds run on ``--workers`` worker processes (Luigi runs one task per worker at a time).

Run by ``workflows.py`` in a process of its own (Luigi forks its workers, which a process with
client threads must not do): ``python benchmarks/peers_luigi.py`` prints one JSON object, or
``{"luigi": "missing"}`` without the package.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

COMMAND = ["/bin/sh", "-c", "true"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chain", type=int, default=40, help="tasks in the chain")
    parser.add_argument("--diamonds", type=int, default=100, help="5-task diamonds run at once")
    parser.add_argument("--workers", type=int, default=8, help="Luigi worker processes for the diamonds")
    args = parser.parse_args()
    try:
        import luigi
    except ImportError:
        print(json.dumps({"luigi": "missing"}))
        return
    logging.getLogger("luigi-interface").setLevel(logging.WARNING)

    class Job(luigi.Task):  # type: ignore[misc]
        """One job: runs the command, then writes its target (complete once that exists)."""

        folder = luigi.Parameter()
        name = luigi.Parameter()
        after = luigi.ListParameter(default=())

        def requires(self) -> list[Any]:
            return [self.clone(name=other, after=_after(str(other))) for other in self.after]

        def output(self) -> Any:
            return luigi.LocalTarget(str(Path(str(self.folder)) / str(self.name)))

        def run(self) -> None:
            subprocess.run(COMMAND, check=True)
            with self.output().open("w") as done:
                done.write("")

    shapes: dict[str, tuple[str, ...]] = {}

    def _after(name: str) -> tuple[str, ...]:
        return shapes[name]

    def build(tasks: list[Any], workers: int) -> float:
        start = time.perf_counter()
        ok = luigi.build(tasks, local_scheduler=True, workers=workers, log_level="WARNING", no_lock=True)
        if not ok:
            raise RuntimeError("a Luigi task failed")
        return time.perf_counter() - start

    with tempfile.TemporaryDirectory(prefix="wfm-bench-luigi-") as folder:
        chain_dir = Path(folder, "chain")
        chain_dir.mkdir()
        for n in range(args.chain):
            shapes[f"J{n}"] = (f"J{n - 1}",) if n else ()
        last = f"J{args.chain - 1}"
        chain_s = build([Job(folder=str(chain_dir), name=last, after=shapes[last])], 1)
        diamond_dir = Path(folder, "diamonds")
        diamond_dir.mkdir()
        ends = []
        for i in range(args.diamonds):
            a, b, c, d, e = (f"D{i}_{x}" for x in "ABCDE")
            shapes.update({a: (), b: (a,), c: (a,), d: (a,), e: (b, c, d)})
            ends.append(Job(folder=str(diamond_dir), name=e, after=shapes[e]))
        diamonds_s = build(ends, args.workers)
    print(
        json.dumps(
            {
                "luigi_version": luigi.__version__,
                "luigi_chain_s": round(chain_s, 3),
                "luigi_diamonds_s": round(diamonds_s, 3),
                "luigi_workers": args.workers,
            }
        )
    )


if __name__ == "__main__":
    main()
