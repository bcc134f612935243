"""``--metrics HOST:PORT``: the Prometheus text format at ``/metrics`` of every long-running process.

Nothing is counted twice: the processes count already (a broker's status counters and its
links' frames, an agent's queues, a historian's landing log), and a *custom collector* reads
those numbers when Prometheus scrapes, and only then, so the hot paths pay nothing for metrics.
The one measurement made for metrics alone is a run's duration (``agents.durations``), where
the agent learns how the run ended. Rates (publications a second, a link's frames a second) are
Prometheus's to compute from the counters: ``rate(wfm_broker_link_frames_sent_total[1m])``.

The state read belongs to the process's event loop. ``prometheus_client`` serves in a thread
of its own, so the collector hands each scrape to the loop (:class:`LoopCollector`) and waits
for the numbers, read between two steps of the loop, never in the middle of one.

Metric names and what they mean are in ``docs/metrics.md``; a Grafana dashboard of them in
``docs/grafana-dashboard.json``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Address"]


@dataclass(frozen=True)
class Address:
    """Where ``/metrics`` is served: ``HOST:PORT`` (``[::1]:9100`` for an IPv6 address)."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Address:
        """ValueError with a one-line reason for anything but ``HOST:PORT``, PORT in 1..65535."""
        host, colon, port = text.strip().rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not colon or not host or not port.isdigit():
            raise ValueError(f"{text!r} is not HOST:PORT (for example 127.0.0.1:9100)")
        if not 1 <= int(port) <= 65535:
            raise ValueError(f"{text!r}: port {int(port)} is not in 1..65535")
        if any(c.isspace() or c in "/[]" for c in host):
            raise ValueError(f"{text!r}: {host!r} is not a host name or address")
        return cls(host, int(port))

    def shifted(self, by: int) -> Address:
        """The address ``by`` ports above (``wfm up``: one port per process); ValueError past 65535."""
        if self.port + by > 65535:
            raise ValueError(f"{self}: no port {self.port + by} for the process {by + 1}")
        return Address(self.host, self.port + by)

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self}/metrics"
