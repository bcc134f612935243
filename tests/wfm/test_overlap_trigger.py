"""What ``wfm trigger`` makes of the coordinator's answer to its Trigger when the workflow's
``max-active`` holds it: SKIPPED (APPL_END first) fails, saying why, as EXPIRED does; CANCELLED
first (it was cancelled while it waited) fails too."""

from __future__ import annotations

import pytest

from broker.client.streams import Delivery
from broker.language import Publication
from wfm.triggers import Expired, NotStarted, Skipped, _wait_start
from workflow_messages import job_status


class Answering:
    """A blocking client whose subscription to the generation's start gets ``publication``."""

    def __init__(self, publication: Publication | None) -> None:
        self.publication = publication

    def receive(self, timeout: float) -> Delivery | None:
        return None if self.publication is None else Delivery("s", self.publication)

    def unsubscribe(self, subscription: str) -> None:
        pass


def answer(job: str, status: str, detail: str = "") -> Publication:
    return job_status("W", job, "g2", status, detail, version="v", agent="agentA")


@pytest.mark.parametrize(
    ("publication", "error", "message"),
    [
        (
            answer("APPL_END", "SKIPPED", "skipped: 1 generation running (limit 1): g1; nothing ran"),
            Skipped,
            "W generation g2 was not started: skipped: 1 generation running (limit 1): g1; nothing ran",
        ),
        (
            answer("APPL_END", "EXPIRED", "expired: late"),
            Expired,
            "W generation g2 was not started: expired: late",
        ),
        (
            answer("APPL_END", "CANCELLED", "cancelled while queued; nothing ran"),
            NotStarted,
            "W generation g2 was not started: cancelled while queued; nothing ran",
        ),
        (None, NotStarted, "nothing started W generation g2 within 1 s"),
    ],
)
def test_a_generation_that_did_not_start_is_an_error_saying_why(
    publication: Publication | None, error: type[NotStarted], message: str
) -> None:
    with pytest.raises(error) as raised:
        _wait_start(Answering(publication), "s", 1.0, "W generation g2")  # type: ignore[arg-type]
    assert type(raised.value) is error and str(raised.value).startswith(message)


def test_a_generation_that_started_is_no_error() -> None:
    _wait_start(Answering(answer("APPL_START", "SUCCESS")), "s", 1.0, "W generation g2")  # type: ignore[arg-type]
