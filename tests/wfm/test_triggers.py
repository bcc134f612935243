"""Generation ids, trigger dates and workflow names: what ``wfm trigger`` accepts."""

from __future__ import annotations

from datetime import datetime

import pytest

from wfm.triggers import check_gid, check_workflow, new_gid, parse_date


def test_new_gid_is_short_sortable_and_unique() -> None:
    early, late = datetime(2026, 11, 23, 9, 5, 7), datetime(2026, 11, 23, 10, 0, 0)
    assert new_gid(early, "3f9a") == "20261123-090507-3f9a"
    assert new_gid(early) < new_gid(late)
    assert len({new_gid(early) for _ in range(50)}) > 40  # random suffix apart within one second
    assert all(check_gid(new_gid(early)) for _ in range(5))


@pytest.mark.parametrize("gid", ["g001", "20261123-ab12cd", "a.b:c_d-e", "x" * 64])
def test_valid_gids(gid: str) -> None:
    assert check_gid(gid) == gid


@pytest.mark.parametrize("gid", ["", "-x", ".x", "a b", "a'b", "x" * 65, "é"])
def test_invalid_gids(gid: str) -> None:
    with pytest.raises(ValueError, match="invalid gid"):
        check_gid(gid)


@pytest.mark.parametrize("text", ["2026-11-23", "2024-02-29"])
def test_valid_dates(text: str) -> None:
    assert parse_date(text).isoformat() == text


@pytest.mark.parametrize("text", ["20261123", "2026-11-31", "2025-02-29", "2026.11.23", "today", "2026-1-2"])
def test_invalid_dates(text: str) -> None:
    with pytest.raises(ValueError, match=r"invalid date .* \(use YYYY-MM-DD"):
        parse_date(text)


@pytest.mark.parametrize(
    ("name", "ok"), [("PAYROLL", True), ("pay_roll-2", True), ("2PAY", False), ("a b", False)]
)
def test_workflow_names(name: str, ok: bool) -> None:
    if ok:
        assert check_workflow(name) == name
    else:
        with pytest.raises(ValueError, match="invalid workflow name"):
            check_workflow(name)
