"""The quality-of-service words after a publication in ``wfm client`` (INTERFACE.md §5)."""

from __future__ import annotations

import pytest

from broker.messages import Qos
from wfm.client_commands import _publication_and_qos


@pytest.mark.parametrize(
    ("line", "qos"),
    [
        ("[class,t],[n,1]", Qos()),
        ("[class,t],[n,1] persistent", Qos()),  # the default, said again
        ("[class,t],[n,1] persistent=false", Qos(persistent=False)),
        ("[class,t],[n,1] persistent=no priority=9", Qos(persistent=False, priority=9)),
        ("[class,t],[n,1] persistent=true", Qos()),
        ("[class,t],[n,1] persistent=YES retain", Qos(retain=True)),
        ("[class,t],[n,1] priority=2 ttl=30s id=a1", Qos(priority=2, ttl=30.0, mid="a1")),
    ],
)
def test_the_words_after_a_publication_make_its_quality_of_service(line: str, qos: Qos) -> None:
    assert _publication_and_qos(line) == ("[class,t],[n,1]", qos)


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("[class,t] persistent=maybe", "persistent must be true or false (yes or no), not 'maybe'"),
        ("[class,t] persistent=", "persistent must be true or false (yes or no), not ''"),
        ("[class,t] persistent=no persistent", "persistent is given twice"),
    ],
)
def test_a_wrong_persistent_word_is_refused(line: str, error: str) -> None:
    with pytest.raises(ValueError, match=error.replace("(", r"\(").replace(")", r"\)")):
        _publication_and_qos(line)
