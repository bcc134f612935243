"""The Hold, Release, Approve and Reject buttons in a real browser (headless Chromium, as
``test_browser.py``): the dashboard filled by hand and served in a thread, the agents a stand-in
that records what it was asked."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.web.served import serving
from tests.web.test_browser import browser
from tests.web.test_holds import holding

__all__ = ["browser"]  # the fixture

pytestmark = pytest.mark.browser


def said(page: object, text: str) -> None:
    """Until the page says ``text`` as an action's answer (a selector: the page's policy allows no
    script from outside, so no wait_for_function)."""
    page.wait_for_selector(f'#action-result.ok:text-is("{text}")', timeout=5000)  # type: ignore[attr-defined]


def test_the_buttons_send_what_the_operator_chose_and_say_what_the_agents_answered(
    browser: object, tmp_path: Path
) -> None:
    with ThreadPoolExecutor(1) as thread:  # Playwright's loop runs in this one: asyncio.run elsewhere
        board, agents = thread.submit(holding, tmp_path).result()
    with serving(board) as url:
        page = browser.new_page()  # type: ignore[attr-defined]
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(f"pageerror: {error}"))
        page.on("console", lambda message: errors.append(f"{message.type}: {message.text}"))
        page.goto(url)
        page.click('tr.run[data-gid="g1"]')
        page.wait_for_selector('[data-approval-job="JobA"]')
        page.select_option("[data-hold-scope]", "JobB")
        page.click('[data-action="hold"]')
        said(page, "agentA: held; agentB: held already")
        page.select_option("[data-hold-scope]", "")  # this generation
        page.click('[data-action="release"]')
        said(page, "agentA: released; agentB: held already")
        page.fill("[data-approval-comment]", "looks fine")
        page.click('[data-action="approve"][data-approval-job="JobA"]')
        said(page, "approved by operator ops: looks fine")
        page.click('[data-action="reject"][data-approval-job="JobA"]')
        said(page, "rejected by operator ops: looks fine")
    assert agents.done == [
        ("hold", "PAYROLL", "JobB", None),
        ("release", "PAYROLL", None, "g1"),
        ("approve", "PAYROLL", "JobA", "g1", True, "looks fine"),
        ("approve", "PAYROLL", "JobA", "g1", False, "looks fine"),
    ]
    assert not [line for line in errors if "Content Security Policy" in line or "error" in line], errors
