"""The dashboard in a real browser: Debian's Chromium, headless, driven by Playwright (pointed at the
system browser: nothing is downloaded). ``make test`` installs Chromium where it can (apt-get as
root or with sudo); without it these tests skip, saying so, and the rest of the suite runs."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.monitor.test_up import free_ports, workflow_dir
from tests.processes import WFM
from wfm.web.headers import POLICY

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def browser() -> Iterator[object]:
    if CHROMIUM is None:
        pytest.skip(
            "no chromium on PATH: `make test` installs it (apt-get install chromium, as root or with sudo)"
        )
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed: pip install -e '.[test]'"
    )
    with sync_api.sync_playwright() as playwright:
        # as root, Chromium refuses its sandbox; the page is our own
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


SLOW = """<workflow name="SLOW">
  <job name="First" agent="agentA"><command>true</command></job>
  <job name="Nap" agent="agentB"><after job="First"/><command>sleep 10</command></job>
</workflow>
"""  # a job that runs long enough to be seen running


@pytest.fixture
def up(tmp_path: Path) -> Iterator[str]:
    """``wfm up`` (no Spark) in a copy of the PAYROLL workflow; the dashboard's URL with its token."""
    port = free_ports(5)
    (workflow_dir(tmp_path) / "slow.xml").write_text(SLOW)
    process = subprocess.Popen(
        [WFM, "up", "--dir", str(tmp_path), "--port", str(port), "--no-spark-connect"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = None
    try:
        for line in process.stdout or ():
            if line.startswith("web "):
                url = line.split()[1]
            if line.startswith("try:"):
                break
        assert url is not None, (
            f"wfm up printed no dashboard URL: {process.stderr.read() if process.stderr else ''}"
        )
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
        assert "Traceback" not in err
        web_log = tmp_path / ".wfm" / "logs" / "web.log"
        assert "Traceback" not in web_log.read_text(), web_log.read_text()


def test_trigger_payroll_from_the_page_and_watch_it_succeed_on_the_dag(
    browser: object, up: str, tmp_path: Path
) -> None:
    base = up.split("?")[0]
    stranger = browser.new_page()  # type: ignore[attr-defined]
    assert stranger.goto(base + "runs").status == 401  # no token, no cookie: nothing shown
    stranger.close()
    page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    page.set_default_timeout(30_000)
    said: list[str] = []  # the console: a script, style or request the policy blocks is reported there
    page.on("console", lambda message: said.append(f"{message.type}: {message.text}"))
    page.on("pageerror", lambda error: said.append(f"pageerror: {error}"))
    shown = page.goto(up)  # the token URL: it sets the cookie and redirects to the Runs page without it
    assert page.url == base and "token" not in page.url
    assert shown.headers["content-security-policy"] == POLICY
    page.wait_for_selector("#live.on")  # the event stream is open: the page will redraw by itself
    page.select_option("#trigger-workflow", "PAYROLL")
    page.click("#trigger")
    page.wait_for_selector("#trigger-result.ok")
    gid = page.inner_text("#trigger-result").split()[-1]
    row = f'tr.run[data-gid="{gid}"]'  # its row in the grid, opened below the grid by a click
    page.click(row)
    run = f'#run section.generation[data-gid="{gid}"]'
    page.wait_for_selector(f'{row}[data-outcome="SUCCESS"]')
    page.wait_for_selector(f'{run}[data-outcome="SUCCESS"]')
    assert page.get_attribute(f'{row} td.cell[data-job="JobD"]', "class") == "cell state-SUCCESS"
    dag = f"{run} svg.dag"
    assert page.get_attribute(f'{dag} [data-job="JobA"]', "data-state") == "SUCCESS"
    assert page.get_attribute(f'{dag} [data-job="JobD"]', "data-state") == "SUCCESS"
    page.click(f'{dag} [data-job="JobA"]')  # its log, fetched from agentA
    log = f'#detail section.log[data-log="JobA"][data-gid="{gid}"] pre'
    page.wait_for_selector(log)
    assert f"PAYROLL {gid} " in page.inner_text(log) and ": JobA extract" in page.inner_text(log)
    assert page.get_attribute(run, "data-outcome") == "SUCCESS"  # no late, stale redraw over it
    page.screenshot(path=str(tmp_path / "runs.png"), full_page=True)

    page.click(f'{run} [data-action="rerun"]')  # every job again, signed as the dashboard's deployer
    page.wait_for_selector("#action-result.ok")
    assert page.inner_text("#action-result") == f"rerunning {gid} as {gid}-r1"
    page.wait_for_selector(f'tr.run[data-gid="{gid}-r1"][data-outcome="SUCCESS"]')
    page.select_option('#runs-filter [name="status"]', "FAILURE")  # the grid's filter
    page.click('#runs-filter [type="submit"]')
    page.wait_for_selector('p.paging:has-text("no generation")')
    assert page.locator("tr.run").count() == 0
    page.select_option('#runs-filter [name="status"]', "SUCCESS")
    page.click('#runs-filter [type="submit"]')
    page.wait_for_selector(f'tr.run[data-gid="{gid}-r1"]')
    assert page.locator("tr.run").count() == 2

    page.goto(base + "workflows")  # as the agents say it is deployed
    page.wait_for_selector('section.workflow[data-workflow="PAYROLL"][data-deployed="true"]')

    page.goto(base + "overlay")
    page.wait_for_selector("svg.overlay")
    assert page.locator("svg.overlay [data-broker]").count() == 3
    assert page.locator("svg.overlay line.link").count() == 2
    for agent in ("agentA", "agentB", "agentC"):  # hanging off their brokers, from the tables
        page.wait_for_selector(f'svg.overlay g.client[data-client="{agent}"]', state="attached")
    page.wait_for_selector("svg.overlay text.rate", state="attached")  # the second walk: rates
    page.wait_for_selector("svg.overlay text.link-rate", state="attached")  # and each link's, live
    assert "⇄" in (page.text_content("svg.overlay text.link-rate >> nth=0") or "")
    assert page.locator('table.counters tr[data-counter="refused.acl"]').count() == 1
    page.evaluate(  # in one step: the live rates redraw the page every walk (2 s)
        """document.querySelector('svg.overlay [data-broker="B2"]')
             .dispatchEvent(new MouseEvent("click", {bubbles: true}))"""
    )
    page.wait_for_selector('[data-detail="B2"]')
    assert "Subscriptions (PRT)" in page.inner_text("#detail")
    page.screenshot(path=str(tmp_path / "overlay.png"), full_page=True)
    assert os.path.getsize(tmp_path / "runs.png") > 0
    # every page worked under the Content-Security-Policy, and the browser blocked nothing
    assert not [line for line in said if "Content Security Policy" in line or "pageerror" in line], said

    page.context.clear_cookies()  # as if wfm up had started again with a new token
    # clicked in the page in one step: a redraw the event stream asks for may replace the element
    # between Playwright's finding and clicking it (and, refused, sign the page out first)
    page.evaluate(
        """document.querySelector('svg.overlay [data-broker="B1"]')
             ?.dispatchEvent(new MouseEvent("click", {bubbles: true}))"""
    )
    page.wait_for_selector("#signed-out")  # said in words, not a refusal's JSON
    assert "printed a new URL" in page.inner_text("#signed-out")
    assert page.inner_text("#live") == "signed out"
    page.reload()
    assert "started again" in page.inner_text("body")  # the refused page itself, for a person


def test_a_running_job_is_shown_running_live_with_its_attempt_agent_and_elapsed_time(
    browser: object, up: str, tmp_path: Path
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    page.set_default_timeout(30_000)
    said: list[str] = []
    page.on("console", lambda message: said.append(f"{message.type}: {message.text}"))
    page.on("pageerror", lambda error: said.append(f"pageerror: {error}"))
    page.goto(up)
    page.wait_for_selector("#live.on")
    nosuch = page.evaluate(  # a workflow nobody deployed: refused, and no phantom generation shown
        """fetch("/api/trigger", {method: "POST", headers: {"Content-Type": "application/json"},
                                  body: JSON.stringify({workflow: "NOSUCH"})})
             .then(async (r) => [r.status, (await r.json()).error])"""
    )
    assert nosuch[0] == 404 and nosuch[1].startswith("no agent has workflow NOSUCH deployed"), nosuch
    page.select_option("#trigger-workflow", "SLOW")
    page.click("#trigger")
    page.wait_for_selector("#trigger-result.ok")
    gid = page.inner_text("#trigger-result").split()[-1]
    page.click(f'tr.run[data-gid="{gid}"]')
    run = f'#run section.generation[data-gid="{gid}"]'
    page.wait_for_selector(f'tr.run[data-gid="{gid}"] td.cell.state-RUNNING[data-job="Nap"]')
    nap = f'{run} svg.dag [data-job="Nap"][data-state="RUNNING"]'
    page.wait_for_selector(
        nap, state="attached"
    )  # while the job sleeps, from the agents' answers (no status yet)
    page.wait_for_selector(f'{nap} text[data-since][data-rest=" · attempt 1 · agentB"]', state="attached")
    assert page.locator(f'{run} svg.gantt [data-job="Nap"][data-state="RUNNING"] rect').count() == 1
    first = page.text_content(f"{nap} text[data-since]") or ""
    assert first.startswith("running ") and first.endswith(" s · attempt 1 · agentB"), first
    page.wait_for_function(  # the script counts on between redraws
        "([selector, first]) => document.querySelector(selector)?.textContent !== first",
        arg=[f"{nap} text[data-since]", first],
    )
    page.screenshot(path=str(tmp_path / "running.png"), full_page=True)
    page.wait_for_selector(f'{run}[data-outcome="SUCCESS"]')
    assert page.get_attribute(f'{run} svg.dag [data-job="Nap"]', "data-state") == "SUCCESS"
    assert page.locator('[data-workflow="NOSUCH"]').count() == 0
    assert not [line for line in said if "Content Security Policy" in line or "pageerror" in line], said


def test_the_history_page_shows_its_summary_first_and_charts_of_one_day_with_matching_legends(
    browser: object,
) -> None:
    from tests.web.served import Reported, filled, report, serving

    board = filled()
    rows, summary = report(days=1)  # a single day: one bar per series, one dot per line
    board.history = Reported((rows, summary))
    with serving(board) as url:
        page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
        said: list[str] = []
        page.on("console", lambda message: said.append(f"{message.type}: {message.text}"))
        page.goto(url.replace("/runs?", "/history?"))
        page.wait_for_selector("table.history-summary")
        first = page.evaluate(
            "document.querySelector('#content').firstElementChild.nextElementSibling.tagName"
        )
        assert first == "TABLE"  # the summary before any chart
        assert page.locator("table.history-summary tr.summary").count() == 3
        chart = 'section.job-history[data-job="JobB"] svg.chart'
        assert page.locator(f"{chart} rect.bar").count() == 2  # runs and failures of the one day
        assert page.locator(f"{chart} circle.dot").count() == 2  # mean and p95: a dot each
        colours = page.evaluate(
            """(chart) => [...document.querySelectorAll(chart)].map((svg) => [...svg.querySelectorAll(
                 ".swatch")].map((swatch) => {
                   const series = [...swatch.classList].find((c) => c.startsWith("series-"));
                   const mark = svg.querySelector(`.${series}:not(.swatch)`);
                   const paint = (e) => getComputedStyle(e)[e.tagName === "line" ? "stroke" : "fill"];
                   return [paint(swatch), paint(mark)];
                 }))""",
            'section.job-history[data-job="JobB"] svg.chart',
        )
        assert [pair[0] == pair[1] for each in colours for pair in each] == [True] * 4, colours
        assert colours[0][0][0] != colours[0][1][0]  # the two series differ
        page.screenshot(path="/tmp/history-one-day.png", full_page=True)
        assert not [line for line in said if "Content Security Policy" in line or "error" in line], said


def test_the_screenshot_recipe_static_mode_lets_headless_chromium_finish(
    browser: object, tmp_path: Path
) -> None:
    """docs/web.md's recipe: ``?static=1`` opens no event stream, so Chromium's
    ``--virtual-time-budget`` can end (with the stream it waits for ever) and --screenshot writes."""
    from tests.web.served import filled, serving

    with serving(filled()) as url:
        page = browser.new_page()  # type: ignore[attr-defined]
        said: list[str] = []
        page.on("console", lambda message: said.append(f"{message.type}: {message.text}"))
        page.on("pageerror", lambda error: said.append(f"pageerror: {error}"))
        streams: list[str] = []
        page.on("request", lambda request: streams.append(request.url) if "/events" in request.url else None)
        page.goto(url + "&static=1")
        assert page.url.endswith("/runs?static=1")  # the token taken, the rest kept
        page.wait_for_selector("tr.run")
        assert page.inner_text("#live") == "not live (static)" and streams == []
        assert not [line for line in said if "Content Security Policy" in line or "error" in line], said
        shot = tmp_path / "runs.png"
        assert CHROMIUM is not None
        done = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--screenshot={shot}", "--window-size=1280,1400", "--virtual-time-budget=5000",
             url + "&static=1"],
            capture_output=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0 and shot.stat().st_size > 10_000, done.stderr[-500:]
