"""Broker addresses: ``socket://HOST:PORT/ID``."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["BrokerURI"]

_URI = re.compile(
    r"socket://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]+):(?P<port>[0-9]{1,5})/(?P<id>[A-Za-z0-9_.:\-]{1,64})"
)


@dataclass(frozen=True, slots=True)
class BrokerURI:
    host: str
    port: int
    id: str

    @classmethod
    def parse(cls, text: str) -> BrokerURI:
        match = _URI.fullmatch(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f"{text!r} is not a broker URI: expected socket://HOST:PORT/ID")
        port = int(match["port"])
        if not 0 < port < 65536:
            raise ValueError(f"{text!r}: port {port} is out of range")
        return cls(match["host"].strip("[]"), port, match["id"])

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"socket://{host}:{self.port}/{self.id}"
