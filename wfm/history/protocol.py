"""Historic queries over the overlay: the HISTORY_QUERY and HISTORY_RESULT publications.

Pure shapes and parsing, shared by the historian (which answers) and ``wfm history --broker`` (which
asks), so both sides agree on every attribute name in one place::

    [class,HISTORY_QUERY],[query,'<uuid>'],[filter,'<filter>'],[since,T],[until,T],[asker,'<name>']
    [class,HISTORY_RESULT],[query,'<uuid>'],[accepted,1]                     (at once, then each HEARTBEAT)
    [class,HISTORY_RESULT],[query,'<uuid>'],[seq,N],[id,'<publication id>'],[at,T],[publication,'<text>']
    [class,HISTORY_RESULT],[query,'<uuid>'],[last,1],[count,N],[digest,'<sha256>'] (and [error,'...'])

With TLS the asker's identity rides in ``asker``: the query is signed by it (``sequence``, ``signer``,
``signature``, :mod:`workflow_messages.signature`), the historian answers only what that identity
may subscribe to (the brokers' access rules), every answer carries ``asker`` so that brokers, whose
rules let a client subscribe to the answers of its own questions only, deliver it to the asker
alone, and the final marker is signed by the historian over the :func:`result_digest` of the
results it sent, so an asker takes no result a broker made up, changed or left out.

``since`` and ``until`` are optional epoch seconds. ``time`` is reserved for the broker's timestamp,
so a result carries the stored publication's broker time as ``at``. Filter and publication texts may
hold both quote kinds, which a string value may not, so they travel as JSON string literals with
``'`` written ``\\u0027`` (like ``wfm.workflow.translate.encode``).

A historian's answer can take many seconds (Spark), so it says at once that it has accepted a query
and repeats that every :data:`HEARTBEAT` seconds until its final marker: an asker tells a slow
historian from a dead one, and gives up on one silent for :data:`STALL` seconds.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

import msgpack

from broker.language import Filter, ParseError, Publication, parse_filter, parse_publication
from broker.language.values import format_string
from workflow_messages.names import HISTORY_QUERY, HISTORY_RESULT

__all__ = [
    "HEARTBEAT",
    "QUERY",
    "RESULT",
    "STALL",
    "Answer",
    "Query",
    "accepted_publication",
    "attributed",
    "check_query_id",
    "decode_text",
    "encode_text",
    "final_publication",
    "parse_answer",
    "parse_query",
    "query_advertisement",
    "query_publication",
    "query_subscription",
    "result_advertisement",
    "result_digest",
    "result_publication",
    "result_subscription",
]

_QUERY_ID_RE = re.compile(r"[A-Za-z0-9-]{1,64}\Z")
QUERY, RESULT = HISTORY_QUERY, HISTORY_RESULT
HEARTBEAT = 2.0  # seconds between a historian's accepted markers while it answers
STALL = 5 * HEARTBEAT  # seconds without a word after which an asker gives a historian up


def encode_text(text: str) -> str:
    """Any text as a string value: a JSON string literal without ``'`` or line breaks."""
    return json.dumps(text, ensure_ascii=False).replace("'", "\\u0027")


def decode_text(value: object) -> str:
    """The inverse of :func:`encode_text`; ValueError if ``value`` is not one (anyone may publish a
    query: JSON nested deeply enough makes the decoder raise RecursionError)."""
    if not isinstance(value, str):
        raise ValueError(f"expected an encoded text, not {value!r}")
    try:
        text = json.loads(value)
    except RecursionError:
        raise ValueError("expected an encoded text, not JSON nested that deep") from None
    if not isinstance(text, str):
        raise ValueError(f"expected an encoded text, not {value!r}")
    return text


@dataclass(frozen=True, slots=True)
class Query:
    """A historic query as the historian receives it."""

    id: str
    filter: Filter
    since: float | None
    until: float | None
    asker: str = ""  # the identity that asks ("" without TLS)


@dataclass(frozen=True, slots=True)
class Answer:
    """One HISTORY_RESULT: a stored publication, a historian's accepted marker (``accepted``: it is
    still answering) or the final marker of its answer (``last``: ``count`` results, or ``error``)."""

    query: str
    last: bool
    seq: int = 0
    id: str = ""
    at: float = 0.0
    publication: Publication | None = None
    count: int = 0
    error: str = ""
    accepted: bool = False
    historian: str = ""  # who answers, the same across its reconnections ("" from an older one)
    digest: str = ""  # a final marker's :func:`result_digest` of the results sent before it


_SIGNED = "[sequence,isPresent,0],[signer,isPresent,''],[signature,isPresent,'']"


def query_advertisement(asker: str = "") -> str:
    """What an asker advertises: questions in its own name only, if it has one (a client may not
    advertise questions another could be said to ask)."""
    own = f"[asker,eq,{format_string(asker)}]" if asker else "[asker,isPresent,'']"
    return (
        f"[class,eq,{QUERY}],[query,isPresent,''],[filter,isPresent,''],[since,isPresent,0],"
        f"[until,isPresent,0],{own},{_SIGNED}"
    )


def query_subscription() -> str:
    return f"[class,eq,{QUERY}]"


def result_advertisement() -> str:
    return (
        f"[class,eq,{RESULT}],[query,isPresent,''],[accepted,isPresent,0],[seq,isPresent,0],"
        "[last,isPresent,0],[count,isPresent,0],[error,isPresent,''],[id,isPresent,''],[at,isPresent,0],"
        "[publication,isPresent,''],[historian,isPresent,''],[asker,isPresent,''],[digest,isPresent,''],"
        f"{_SIGNED}"
    )


def result_subscription(query_id: str, asker: str = "") -> str:
    """The answers to one query; with the asker's identity, since a client may subscribe to the
    answers of its own questions only."""
    mine = f",[asker,eq,{format_string(asker)}]" if asker else ""
    return f"[class,eq,{RESULT}],[query,eq,'{check_query_id(query_id)}']{mine}"


def check_query_id(value: object) -> str:
    """A query id is a plain token (the asker uses a uuid), so it needs no quoting anywhere."""
    if not isinstance(value, str) or not _QUERY_ID_RE.match(value):
        raise ValueError(f"invalid query id {value!r} (1 to 64 letters, digits and -)")
    return value


def query_publication(
    query_id: str, text: str, since: float | None, until: float | None, asker: str = ""
) -> Publication:
    attributes: dict[str, str | float] = {"query": check_query_id(query_id), "filter": encode_text(text)}
    if asker:
        attributes["asker"] = asker
    if since is not None:
        attributes["since"] = since
    if until is not None:
        attributes["until"] = until
    return Publication(QUERY, attributes)


def parse_query(publication: Publication) -> tuple[str, Query | str]:
    """(query id, the query or a one-line reason it cannot be answered); ValueError without an id."""
    query_id = check_query_id(publication.get("query"))
    try:
        text = decode_text(publication.get("filter"))
        wanted = parse_filter(text)
    except ParseError as error:
        return query_id, f"invalid filter: {error}"
    except ValueError as error:
        return query_id, f"invalid query: {error}"
    bounds: list[float | None] = []
    for name in ("since", "until"):
        value = publication.get(name)
        if value is not None and (isinstance(value, str | bool)):
            return query_id, f"invalid query: {name} must be epoch seconds"
        bounds.append(None if value is None else float(value))
    asker = publication.get("asker", "")
    if not isinstance(asker, str):
        return query_id, "invalid query: asker must be a name"
    return query_id, Query(query_id, wanted, bounds[0], bounds[1], asker)


def result_publication(query_id: str, seq: int, id: str, at: float, publication: Publication) -> Publication:
    attributes: dict[str, str | float] = {
        "query": check_query_id(query_id),
        "seq": seq,
        "id": encode_text(id),
        "at": at,
        "publication": encode_text(str(publication)),
    }
    return Publication(RESULT, attributes)


def accepted_publication(query_id: str) -> Publication:
    attributes: dict[str, str | int] = {"query": check_query_id(query_id), "accepted": 1}
    return Publication(RESULT, attributes)


def final_publication(query_id: str, count: int, error: str = "", digest: str = "") -> Publication:
    attributes: dict[str, str | int] = {"query": check_query_id(query_id), "last": 1, "count": count}
    if error:
        attributes["error"] = encode_text(error)
    if digest:
        attributes["digest"] = digest
    return Publication(RESULT, attributes)


def result_digest(results: Iterable[tuple[int, str, float, Publication]]) -> str:
    """What a final marker's ``digest`` says of the results sent before it, each (seq, id, at,
    publication) in ``seq`` order: historian and asker compute it alike, from the values on the wire."""
    hasher = hashlib.sha256()
    for seq, id, at, publication in results:
        hasher.update(msgpack.packb([seq, id, at, str(publication)], use_bin_type=True))
    return hasher.hexdigest()


def attributed(answer: Publication, historian: str, asker: str) -> Publication:
    """The answer with who sends it (a historian's identity survives its reconnections, which give
    it a new client name, and so a new ``<broker>/<client>`` in its publications' ids) and, if
    known, to whom (brokers deliver it to that identity only)."""
    extra = [("historian", historian)] + ([("asker", asker)] if asker else [])
    return Publication(answer.cls, [*((k, v) for k, v in answer.items() if k != "class"), *extra])


def parse_answer(publication: Publication) -> Answer:
    """A HISTORY_RESULT publication; ValueError if it is malformed."""
    answer = _answer(publication)
    historian = publication.get("historian")
    return replace(answer, historian=historian) if isinstance(historian, str) else answer


def _answer(publication: Publication) -> Answer:
    query_id = check_query_id(publication.get("query"))
    if "last" in publication:
        count = publication.get("count", 0)
        error = publication.get("error")
        digest = publication.get("digest", "")
        return Answer(
            query_id,
            True,
            count=int(count) if not isinstance(count, str) else 0,
            error="" if error is None else decode_text(error),
            digest=digest if isinstance(digest, str) else "",
        )
    if "accepted" in publication:
        return Answer(query_id, False, accepted=True)
    at, seq = publication.get("at"), publication.get("seq")
    if isinstance(at, str) or isinstance(seq, str) or at is None or seq is None:
        raise ValueError(f"malformed {RESULT}: {publication}")
    stored = parse_publication(decode_text(publication.get("publication")))
    return Answer(query_id, False, int(seq), decode_text(publication.get("id")), float(at), stored)
