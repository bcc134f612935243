"""``wfm web`` as a process: it serves, ends its event streams and exits 0 on SIGTERM; a port in use
is one line."""

from __future__ import annotations

import signal
import socket
import subprocess
import urllib.request

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
        url = line.split()[-1]
        with urllib.request.urlopen(url + "overlay", timeout=10) as page:
            assert b"/fragment/overlay" in page.read()
        stream = urllib.request.urlopen(url + "events", timeout=10)
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
