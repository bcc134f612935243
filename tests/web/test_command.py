"""``wfm web`` as a process: it serves, ends its event streams and exits 0 on SIGTERM; a port in use
is one line; it prints the URL with the token it made, or says a token was given."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import urllib.error
import urllib.request

import pytest

from tests.processes import WFM

NOWHERE = "socket://127.0.0.1:1/B1"  # no broker: the pages say so, the server still serves


def test_serves_and_exits_0_on_sigterm_with_an_event_stream_open() -> None:
    web = subprocess.Popen(
        [WFM, "web", "--broker", NOWHERE, "--port", "0"], stderr=subprocess.PIPE, text=True
    )
    try:
        assert web.stderr is not None
        line = web.stderr.readline()
        assert line.startswith("wfm: dashboard on http://127.0.0.1:"), line
        url, _, token = line.split()[-1].partition("?token=")
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(url + "overlay", timeout=10)
        signed = {"Authorization": f"Bearer {token}"}
        with urllib.request.urlopen(
            urllib.request.Request(url + "overlay", headers=signed), timeout=10
        ) as page:
            assert b"/fragment/overlay" in page.read()
        stream = urllib.request.urlopen(urllib.request.Request(url + "events", headers=signed), timeout=10)
        assert stream.readline() == b"retry: 2000\n"
    finally:
        web.send_signal(signal.SIGTERM)
        _, err = web.communicate(timeout=20)
    assert web.returncode == 0, err
    assert "Traceback" not in err
    stream.close()


def test_a_port_in_use_is_one_line() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [WFM, "web", "--broker", NOWHERE, "--port", str(port)], capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 1
    assert done.stderr == f"wfm: error: cannot listen on 127.0.0.1:{port}: Address already in use\n"


def test_a_token_given_is_taken_and_not_printed() -> None:
    token = "given-token-0123456789"
    web = subprocess.Popen(
        [WFM, "web", "--broker", NOWHERE, "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "WFM_WEB_TOKEN": token},
    )
    try:
        assert web.stderr is not None
        line = web.stderr.readline()
        assert line.endswith("/ (open it with ?token=TOKEN, the token given)\n") and token not in line, line
        runs = line.split()[3] + "api/runs"
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(runs, timeout=10)
        with urllib.request.urlopen(
            urllib.request.Request(runs, headers={"X-WFM-Token": token}), timeout=10
        ) as r:
            assert r.status == 200
    finally:
        web.send_signal(signal.SIGTERM)
        web.communicate(timeout=20)


def test_a_bad_token_is_one_line() -> None:
    done = subprocess.run(
        [WFM, "web", "--broker", NOWHERE, "--port", "0", "--token", "short"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "Invalid value for --token / WFM_WEB_TOKEN: the dashboard's token must be 16 to 512" in done.stderr
