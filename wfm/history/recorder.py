"""What the historian keeps: each delivery landed once, whoever published it. Pure but for the
landing log's disk; :class:`wfm.history.historian.RecorderService` feeds it from the overlay."""

from __future__ import annotations

from broker.language import Publication
from broker.messages import publisher_of
from wfm.history.landing import Landing

__all__ = ["SEEN_LIMIT", "Recent", "Recorder"]

SEEN_LIMIT = 100_000  # ids remembered per process; older repeats are removed on read by id


class Recent:
    """The last ``limit`` ids added: enough to know a repeat, which comes soon after the original."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._ids: dict[str, None] = {}  # insertion-ordered: the oldest is forgotten first

    def __contains__(self, id: object) -> bool:
        return id in self._ids

    def add(self, id: str) -> None:
        self._ids[id] = None
        if len(self._ids) > self.limit:
            del self._ids[next(iter(self._ids))]


class Recorder:
    """Appends deliveries to the landing log once per id (the log also dedups on read, but a
    redelivery within a process need not cost disk)."""

    def __init__(self, landing: Landing) -> None:
        self.landing = landing
        self.landed = 0
        self._seen = Recent(SEEN_LIMIT)

    def record(self, publication: Publication, at: float, publication_id: str) -> bool:
        if publication_id in self._seen:
            return False
        self._seen.add(publication_id)
        self.landing.append(publication, at, publisher_of(publication_id), publication_id)
        self.landed += 1
        return True
