"""What signing costs per message: an agent signing a job status and an agent checking one,
against framing the same status (encode and decode of its Publish frame), measured in one run.

A status is signed by its agent's certificate (ECDSA P-256, SHA-256) and checked by every agent
whose job waits on it: signature, CA, role and the agent the job is deployed on
(``agents.trust.Trust.admit_status``; a certificate's CA check is cached per certificate, as in
an agent). "check" is the first check of a publication; "again" a repeat, which an agent's cache
of checked publications answers (the Trigger is in every firing of its generation). The frame of
a signed status is larger too: it carries the certificate.

Prints one result line: sign, check and check again in microseconds per status, the unsigned
status's encode+decode as the baseline, their ratios, the frame sizes, and the core count.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from agents.trust import Trust, identity_author, load_ca
from broker.messages import Publish
from broker.transport.codec import decode, encode
from wfm.certs import init, issue
from workflow_messages import job_status

ROUNDS = 2_000
HEADER = 4  # a frame's length prefix, which decode does not take


def per_call(work: Callable[[], object], rounds: int = ROUNDS) -> float:
    """Microseconds per call, the best of three rounds (a busy machine's preemptions do not count)."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(rounds):
            work()
        best = min(best, time.perf_counter() - start)
    return best / rounds * 1e6


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        certs = Path(scratch)
        init(certs)
        issue(certs, "agentA", "agent")
        author = identity_author(certs, "agentA")
        trust = Trust(ca=load_ca(certs))
    status = job_status(
        "PAYROLL", "JobA", "g1", "SUCCESS", "exit 0 after 1.2 s", version="v1", agent="agentA"
    )
    signed = author.sign_publication(status)
    now = time.time()
    plain_frame, signed_frame = (encode(Publish("1@x", p)) for p in (status, signed))
    frame = per_call(lambda: decode(encode(Publish("1@x", status))[HEADER:]))
    sign = per_call(lambda: author.sign_publication(status))
    fresh = iter([author.sign_publication(status) for _ in range(3 * ROUNDS)])  # each checked once
    check = per_call(lambda: trust.admit_status(next(fresh), now, "agentA"))
    again = per_call(lambda: trust.admit_status(signed, now, "agentA"))
    result = {
        "benchmark": "signing",
        "sign_us": round(sign, 1),
        "check_us": round(check, 1),
        "check_again_us": round(again, 1),
        "baseline_frame_us": round(frame, 1),
        "sign_ratio": round(sign / frame, 1),
        "check_ratio": round(check / frame, 1),
        "frame_bytes": len(plain_frame),
        "signed_frame_bytes": len(signed_frame),
        "cores": os.cpu_count(),
    }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
