"""A JOBSTATUS read back: what :func:`job_status` wrote, and what anyone else may publish."""

from __future__ import annotations

import pytest

from broker.language import Value
from workflow_messages import job_status
from workflow_messages.jobstatus import JobStatus, parse_job_status


def test_a_status_reads_back_as_it_was_written() -> None:
    publication = job_status(
        "W", "A", "g1", "NORUN", "skipped: B ended FAILURE", version="v1", agent="a1", attempt=2,
        started=10.5, duration=1.25, skipped=True, cancelled=True,
    )  # fmt: skip
    assert parse_job_status(publication) == JobStatus(
        "W", "A", "g1", "NORUN", "skipped: B ended FAILURE", "v1", 2, 10.5, 1.25, skipped=True, cancelled=True
    )


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({"applname": "W", "jobname": "A", "GID": "g1"}, None),  # no status
        ({"applname": "W", "jobname": 1, "GID": "g1", "status": "SUCCESS"}, None),
        (
            {"applname": "W", "jobname": "A", "GID": "g1", "status": "SUCCESS"},
            JobStatus("W", "A", "g1", "SUCCESS"),  # an older agent's: no version, no times
        ),
        (
            {
                "applname": "W", "jobname": "A", "GID": "g1", "status": "SUCCESS", "detail": 3,
                "version": 2, "attempt": "x", "started": "soon", "skipped": 2, "cancelled": 0,
            },
            JobStatus("W", "A", "g1", "SUCCESS", "3"),  # ill-typed fields read as not given
        ),
    ],
)  # fmt: skip
def test_what_anyone_may_publish_reads_as_a_status_or_none(
    attributes: dict[str, Value], expected: JobStatus | None
) -> None:
    assert parse_job_status(attributes) == expected
