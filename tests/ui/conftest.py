"""Fixtures of the dashboard tests: a real ``workrun ui`` server (uvicorn on a free loopback port) and,
for browser tests, one headless Chromium per module driven by Selenium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"


class Server:
    """A running ``workrun ui --port 0 --no-open``: ``url`` (with token), ``base``, ``port``, ``token``."""

    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url
        self.base = url.split("/?")[0]
        self.port = int(self.base.rsplit(":", 1)[1])
        self.token = url.split("token=", 1)[1]

    def client(self, **kwargs: Any) -> Any:
        """An httpx client holding the session cookie (after the token visit)."""
        import httpx

        client = httpx.Client(base_url=self.base, timeout=60, **kwargs)
        first = client.get(f"/?token={self.token}")
        assert first.status_code == 303, first.text
        return client


def start_server(*args: str, env: dict[str, str] | None = None) -> Server:
    """Start ``workrun ui --port 0 --no-open ARGS`` and wait for the URL it prints (generous timeout)."""
    proc = subprocess.Popen([sys.executable, "-m", "workrun", "ui", "--port", "0", "--no-open", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    line = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        m = re.search(r"(http://127\.0\.0\.1:\d+/\?token=\S+)", line)
        if m:
            return Server(proc, m.group(1))
        if proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"workrun ui did not print its URL: {line!r} {proc.stderr.read() if proc.stderr else ''}")


def stop_server(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


@pytest.fixture
def ui_server() -> Iterator[Callable[..., Server]]:
    """``ui_server(*args, env=…)`` starts a dashboard for this test's ``WORKRUN_HOME``; stopped afterwards."""
    started: list[Server] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Server:
        server = start_server(*args, env=env)
        started.append(server)
        return server

    yield start
    for s in started:
        stop_server(s)


def chromium_missing() -> str | None:
    """Why browser tests cannot run here, or None."""
    if not Path(CHROMIUM).exists() or not shutil.which("chromedriver"):
        return ("needs Debian's Chromium and its driver: `apt-get install -y chromium chromium-driver` "
                f"({CHROMIUM} and chromedriver on PATH)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "needs selenium: pip install -e '.[test]'"
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One headless Chromium (Selenium) for the module, with a fresh profile."""
    why = chromium_missing()
    if why:
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                "--window-size=1280,900", f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
