"""The dashboard in a real headless Chromium (Selenium + Debian's chromium-driver), against a real
``workrun ui`` and real runs of uv Apps: the tutorial's graph, live updates without reload, Retry (accepting a
code change) releasing a held-back compensation, and Re-run keeping the old record (R-U2, R-U3, R-U4).

With ``WORKRUN_SCREENSHOTS=DIR`` the tests save the README's screenshots there (``dashboard-*.png``).
"""

from __future__ import annotations

import re
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "demo_apps" / "workflows" / "tutorial.toml"
WAIT = 90  # seconds: generous for a loaded machine


def until(check: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    """Poll ``check`` until it returns something truthy (the browser or the journal catching up)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # a stale element while the live region is swapped: look again
            last = exc
        else:
            if last:
                return last
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def attr(driver: Any, css: str, name: str = "data-status") -> str | None:
    """The attribute of the first element matching ``css`` (None: none), read again when a live update swapped
    the element between finding and reading it (stale)."""
    from selenium.common.exceptions import StaleElementReferenceException

    for _ in range(50):
        found = driver.find_elements("css selector", css)
        try:
            return found[0].get_attribute(name) if found else None
        except StaleElementReferenceException:
            time.sleep(0.05)
    raise AssertionError(f"{css} kept being replaced while it was read")


def offscreen(driver: Any, css: str) -> list[str]:
    """The shown elements matching ``css`` that reach past either side of the window (R-D8), as HTML heads."""
    return driver.execute_script(
        "var w = document.documentElement.clientWidth; return Array.from(document.querySelectorAll(arguments[0]))"
        ".filter(b => { var r = b.getBoundingClientRect(); return r.width > 0 && (r.left < 0 || r.right > w); })"
        ".map(b => b.outerHTML.slice(0, 80));", css)


def screenshot(driver: Any, name: str) -> None:
    folder = os.environ.get("WORKRUN_SCREENSHOTS")
    if folder:
        target = ROOT / folder if not Path(folder).is_absolute() else Path(folder)
        target.mkdir(parents=True, exist_ok=True)
        driver.set_window_size(1280, 1000)
        driver.save_screenshot(str(target / name))


def test_tutorial_graph_then_rerun_keeps_old_record(browser, ui_server, workrun) -> None:
    r = workrun("run", TUTORIAL, "--json")
    assert r.code == 1, r
    old = r.json()["run_id"]
    server = ui_server()
    browser.get(server.url)
    css = f'tr.run-row[data-run="{old}"]'
    # the live update may swap the list between a look-up and a read: each check looks the row up afresh
    until(lambda: "cleanup-tutorial" in browser.find_element("css selector", css).text
          and "compensated: 1 of 1" in browser.find_element("css selector", css).text, "the run in the list")
    until(lambda: browser.find_element("css selector", f"{css} a").click() or True, "the run's link clicked")
    until(lambda: attr(browser, 'g.node[data-node="create"]') == "succeeded", "create succeeded")
    assert attr(browser, 'g.node[data-node="boom"]') == "failed"
    badge = 'g.node[data-node="create"] g.cbadge'
    until(lambda: browser.find_element("css selector", badge).get_attribute("data-status") == "succeeded"
          and "#1 compensation succeeded" in browser.find_element("css selector", badge).text, "create's badge")
    assert browser.find_elements("css selector", 'g.node[data-node="boom"] g.cbadge') == []  # failed: not owed
    until(lambda: browser.find_element("css selector", "#rollup").text == "compensated: 1 of 1", "the roll-up")
    screenshot(browser, "dashboard-compensated.png")

    # a live update may swap the button between finding and clicking it (stale): find it again
    until(lambda: browser.find_element("css selector", "#rerun").click() or True, "a click on Re-run")
    until(lambda: "/runs/" in browser.current_url and old not in browser.current_url, "the new run's page")
    new = browser.current_url.split("/runs/", 1)[1].split("?", 1)[0]
    assert until(lambda: attr(browser, "#run-status") == "failed", "the re-run to fail like the first")
    assert f"re-run of {old}" in browser.find_element("css selector", ".facts").text
    browser.get(f"{server.base}/runs/{old}")
    assert attr(browser, "#run-status") == "failed"
    assert browser.find_element("css selector", "h1").text.startswith(f"Run {old}")
    assert attr(browser, 'g.node[data-node="create"] g.cbadge') == "succeeded"
    listed = workrun("runs", "list", "--json").json()
    assert [x["run_id"] for x in listed] == [new, old]
    assert listed[0]["rerun_of"] == old
    events = workrun("runs", "show", old, "--json")  # the old record is untouched: same operations
    assert [op["operation_id"] for op in events.json()["operations"]] == [op["operation_id"]
                                                                         for op in r.json()["operations"]]


WAITER_APP = """
[tool.workrun.apps.waiter]
kind = "process"
entry = "main.py"
timeout = 300
"""
WAITER_MAIN = """
import time
from pathlib import Path
from workrun_sdk import process
data = process.input()
flag = Path(data["flag"])
end = time.time() + 240
while not flag.exists() and time.time() < end:
    time.sleep(0.05)
process.result({"saw": flag.exists()})
"""


def test_run_in_progress_updates_live(browser, ui_server, make_project, write_workflow, tmp_path: Path) -> None:
    project = make_project("waiter", WAITER_APP, {"main.py": WAITER_MAIN})
    flag = tmp_path / "go"
    wf = write_workflow("live", f"""
        name = "live"
        [nodes.wait]
        project = "{project}"
        app = "waiter"
        input = {{ flag = "{flag}" }}
        [nodes.after]
        project = "{project}"
        app = "waiter"
        input = {{ flag = "{flag}", saw = "{{{{ nodes.wait.result.saw }}}}" }}
    """)
    runner = subprocess.Popen([sys.executable, "-m", "workrun", "run", str(wf), "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        server = ui_server()
        client = server.client()
        run_id = until(lambda: (client.get("/api/runs").json() or [{}])[0].get("run_id"), "the run to start")
        browser.get(server.url)  # the token visit: the browser gets its session cookie
        browser.get(f"{server.base}/runs/{run_id}")
        until(lambda: attr(browser, 'g.node[data-node="wait"]') == "running", "wait running on the page")
        assert attr(browser, 'g.node[data-node="after"]') == "pending"
        assert browser.find_elements("css selector", "path.edge-template")  # `after` uses wait's result
        browser.execute_script("window.__sameDocument = 42;")
        # R-D5: the focus stays on its button when a button before it (Stop) goes away at the run's end
        assert browser.find_elements("css selector", "#stop")
        browser.execute_script("document.querySelector('[data-zoom=\"1.25\"]').focus();")
        flag.write_text("go")
        until(lambda: attr(browser, 'g.node[data-node="wait"]') == "succeeded", "wait succeeded without reload")
        until(lambda: attr(browser, "#run-status") == "succeeded", "the run to succeed without reload")
        until(lambda: not browser.find_elements("css selector", "#stop"), "the Stop button to go")
        assert browser.execute_script("return window.__sameDocument;") == 42  # never reloaded
        assert browser.execute_script("return document.activeElement.getAttribute('data-zoom');") == "1.25"
        out, err = runner.communicate(timeout=WAIT)
        assert runner.returncode == 0, err
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()


FRAGILE_APP = """
[tool.workrun.apps.fragile]
kind = "process"
entry = "main.py"
timeout = 60
compensation = { entry = "compensate.py", max_retries = 0 }
"""
FRAGILE_MAIN = """
from workrun_sdk import process
process.result({"booked": process.input().get("after", "?")})
"""
FRAGILE_BROKEN = """
from workrun_sdk import compensation
ctx = compensation.context()
raise RuntimeError("bug: cancel() is not written yet")
"""
FRAGILE_FIXED = """
from workrun_sdk import compensation
ctx = compensation.context()
compensation.result({"cancelled": ctx.original_result["booked"]})
"""


def _failed_booking(make_project, marker_project, write_workflow, workrun) -> tuple[Path, Any]:
    """A run of reserve -> book -> charge where charge fails, book's compensation fails (its code has a bug) and
    reserve's is held back by it: the fragile project's path and the run's ``--json`` result."""
    fragile = make_project("fragile", FRAGILE_APP, {"main.py": FRAGILE_MAIN, "compensate.py": FRAGILE_BROKEN})
    wf = write_workflow("booking", f"""
        name = "booking"
        [nodes.reserve]
        project = "{marker_project}"
        app = "mark"
        input = {{ name = "room" }}
        [nodes.book]
        project = "{fragile}"
        app = "fragile"
        input = {{ after = "{{{{ nodes.reserve.result.name }}}}" }}
        [nodes.charge]
        project = "{marker_project}"
        app = "mark"
        needs = ["book"]
        input = {{ fail = true }}
    """)
    r = workrun("run", wf, "--json")
    assert r.code == 1, r
    return fragile, r


def test_retry_with_fixed_code_releases_held_back(browser, ui_server, make_project, marker_project,
                                                    write_workflow, workrun) -> None:
    fragile, r = _failed_booking(make_project, marker_project, write_workflow, workrun)
    run_id = r.json()["run_id"]
    comps = {op["node_key"]: op["compensation"] for op in r.json()["operations"] if op["compensation"]}
    assert comps["book"]["status"] == "failed" and comps["reserve"]["status"] == "blocked", comps
    book, reserve = comps["book"]["compensation_id"], comps["reserve"]["compensation_id"]

    server = ui_server()
    browser.get(server.url)
    browser.get(f"{server.base}/runs/{run_id}")
    until(lambda: attr(browser, f'g.cbadge[data-compensation="{book}"]') == "failed", "book's compensation failed")
    assert attr(browser, f'g.cbadge[data-compensation="{reserve}"]') == "blocked"
    # read through until(): a live update may swap the elements between finding and reading them (stale)
    until(lambda: browser.find_element("css selector", "#rollup").text == "needs attention: 1 failed, 1 blocked",
          "the roll-up")
    until(lambda: browser.find_element("css selector", "#first-attention").get_attribute("href")  # R-D2
          .endswith("#c-" + comps["book"]["compensation_id"]), "the link to the first that needs a person")
    screenshot(browser, "dashboard-held-back.png")

    (fragile / "compensate.py").write_text(textwrap.dedent(FRAGILE_FIXED))  # the developer fixes the code

    def retry() -> bool:  # a live update may swap the box between finding and clicking: until() tries again
        box = browser.find_element("css selector", f'div.compensation[data-compensation="{book}"]')
        accept = box.find_element("css selector", 'input[name="accept_code_change"]')
        if not accept.is_selected():
            accept.click()
        box.find_element("css selector", "button.retry").click()
        return True

    until(retry, "Retry with the code change accepted")
    until(lambda: attr(browser, f'g.cbadge[data-compensation="{book}"]') == "succeeded", "book compensated")
    until(lambda: attr(browser, f'g.cbadge[data-compensation="{reserve}"]') == "succeeded", "reserve released and run")
    until(lambda: browser.find_element("css selector", "#rollup").text == "compensated: 2 of 2", "the roll-up")
    shown = workrun("compensations", "show", book, "--json").json()
    assert [a["trigger"] for a in shown["attempts"]] == ["auto", "operator"]
    assert shown["events"][0]["action"] == "retry" and shown["events"][0]["actor"].startswith("ui:")
    assert shown["events"][0]["args"] == {"accept_code_change": True}


def test_run_page_history_and_disconnected(browser, ui_server, workrun) -> None:
    """R-D3: inputs, data, stdout and a chronological timeline with local times and their UTC offsets; R-D5: the
    page says "disconnected" within 3 s of its server stopping, and a form being typed in stays as typed."""
    import re

    from _kit.processes import wait_for  # noqa: F401  (the same polling helper the e2e tests use)
    from conftest import stop_server  # type: ignore[import-not-found]

    r = workrun("run", TUTORIAL, "--json")
    assert r.code == 1, r
    run_id = r.json()["run_id"]
    server = ui_server()
    browser.get(server.url.replace("/?", f"/runs/{run_id}?"))
    until(lambda: browser.find_elements("css selector", "#timeline"), "the timeline")
    # read in one script: the page's live update may swap its content between two element look-ups
    data, cells = browser.execute_script(
        "return [document.getElementById('run-data').innerText, Array.from(document.querySelectorAll("
        "'#timeline tr')).slice(1).map(r => Array.from(r.querySelectorAll('td')).map(c => c.innerText))];")
    assert "Hello, Workrun!" in data  # the tutorial's input, and its data (which starts as its inputs)
    kinds = [row[0] for row in cells]
    assert kinds.count("call") == 2 and kinds.count("attempt") == 1, kinds
    starts = [row[3] for row in cells]
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d[+-]\d\d:\d\d", s) for s in starts), starts
    stop_server(server)
    until(lambda: browser.find_elements("css selector", "#disconnected"), "the disconnected notice", timeout=3.5)
    # a dashboard started again on that port has a new token: it answers this page's polls, but 401; the page is
    # no more live than with no server, and says so (dashboard review: it said nothing and showed old data)
    ui_server("--port", str(server.port))
    until(lambda: "session ended" in browser.execute_script(
        "var n = document.getElementById('disconnected'); return n ? n.textContent : '';"),
        "the session-ended notice", timeout=5)


def test_narrow_screen_dark_theme_and_graph_zoom(browser, ui_server, workrun) -> None:
    """R-D8: at 390 px every action and graph button is on screen, a system dark setting gives the dark theme,
    and four pages meet WCAG contrast in both themes (:data:`CONTRAST_JS`); R-D6: the zoom buttons grow the graph
    and "fit" brings it back."""
    r = workrun("run", TUTORIAL, "--json")
    assert r.code == 1, r
    server = ui_server()
    page = server.url.replace("/?", f"/runs/{r.json()['run_id']}?")
    try:
        browser.set_window_size(390, 844)
        browser.get(page)
        until(lambda: browser.find_elements("css selector", "#rerun"), "the run page")
        off = offscreen(browser, ".actions button, .graph-tools button")
        assert off == [], off
        widths = browser.execute_script(
            "var svg = document.querySelector('svg.graph'); var w0 = Number(svg.getAttribute('width'));"
            "document.querySelector('[data-zoom=\"1.25\"]').click(); var w1 = Number(svg.getAttribute('width'));"
            "document.querySelector('[data-zoom=\"0\"]').click(); var wrap = document.querySelector('.graph-wrap');"
            "return [w0, w1, Number(svg.getAttribute('width')), wrap.clientWidth, wrap.scrollWidth];")
        # "fit": the whole graph in its frame (here narrower than the graph), so nothing to pan sideways
        assert widths[1] > widths[0] > widths[2] and widths[2] <= widths[3] and widths[4] <= widths[3], widths
        # R-D6 by keyboard: Tab reaches a node, and Enter opens its section
        browser.execute_script("document.querySelector('#rerun').focus();")
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        for _ in range(20):  # keys to the page, whichever element has the focus (a live update may swap it)
            ActionChains(browser).send_keys(Keys.TAB).perform()
            if browser.execute_script("return !!document.activeElement.closest('svg.graph g.node');"):
                break
        node = browser.execute_script("return document.activeElement.getAttribute('data-node');")
        assert node, "no graph node is reachable with Tab"
        opened = ("return Array.from(document.querySelectorAll('details.node-detail[open] summary strong'))"
                  ".map(s => s.textContent);")
        browser.execute_script("document.querySelectorAll('details.node-detail').forEach(d => { d.open = false; });")
        ActionChains(browser).send_keys(Keys.ENTER).perform()
        assert node in browser.execute_script(opened)
        light = browser.execute_script("return getComputedStyle(document.body).backgroundColor;")
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia",
                                {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        browser.get(page)
        until(lambda: browser.find_elements("css selector", "#rerun"), "the run page, dark")
        dark = browser.execute_script("return getComputedStyle(document.body).backgroundColor;")
        assert dark == "rgb(13, 17, 23)" and light != dark, (light, dark)
        browser.set_window_size(1280, 900)
        # R-D8: all text has WCAG AA contrast with what is behind it and every form field's border 3:1, on the
        # Runs, run, Compensations and Tickets pages, in the light and the dark theme
        pages = [server.url, page, server.url.replace("/?", "/compensations?"), server.url.replace("/?", "/tickets?")]
        for scheme in ("light", "dark"):
            browser.execute_cdp_cmd("Emulation.setEmulatedMedia",
                                    {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
            for where in pages:
                browser.get(where)
                until(lambda: browser.find_elements("css selector", "main"), f"{where} ({scheme})")
                bad = browser.execute_script(CONTRAST_JS)
                assert bad == [], (scheme, where, bad)
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        browser.set_window_size(1280, 900)


# WCAG 2.1 contrast in the page as the browser draws it: text 4.5:1 (3:1 when large, SC 1.4.3) against the
# nearest background behind it; the borders of form fields 3:1 against theirs (SC 1.4.11)
CONTRAST_JS = """
function rgb(s) { var m = s.match(/[\\d.]+/g); return m ? m.map(Number) : [0, 0, 0, 0]; }
function lum(c) { var v = c.slice(0, 3).map(function (x) { x /= 255;
  return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
  return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; }
function ratio(a, b) { var x = lum(a), y = lum(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); }
function bg(el) { for (; el; el = el.parentElement) { var c = rgb(getComputedStyle(el).backgroundColor);
  if (c.length < 4 || c[3] > 0) return c; }
  return matchMedia('(prefers-color-scheme: dark)').matches ? [13, 17, 23] : [255, 255, 255]; }
function visible(el) { var r = el.getBoundingClientRect(); var s = getComputedStyle(el);
  return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none'; }
var bad = [];
document.querySelectorAll('svg text').forEach(function (t) {  // the graph: text on its box or badge
  var box = t.closest('g') && t.closest('g').querySelector('rect'); if (!box || !visible(t)) return;
  var r = ratio(rgb(getComputedStyle(t).fill), rgb(getComputedStyle(box).fill));
  if (r < 4.5) bad.push('svg text "' + t.textContent.trim().slice(0, 30) + '" ' + getComputedStyle(t).fill +
    ' on ' + getComputedStyle(box).fill + ': ' + r.toFixed(2)); });
document.querySelectorAll('body *').forEach(function (el) {
  if (el.closest('svg') || !visible(el)) return;
  var own = Array.from(el.childNodes).some(function (n) { return n.nodeType === 3 && n.textContent.trim(); });
  var s = getComputedStyle(el);
  if (own) { var size = parseFloat(s.fontSize), large = size >= 24 || (size >= 18.66 && Number(s.fontWeight) >= 700);
    var r = ratio(rgb(s.color), bg(el)); var op = Number(s.opacity);
    if (r < (large ? 3 : 4.5) && op > 0) bad.push(el.tagName + '.' + el.className + ' "' +
      el.textContent.trim().slice(0, 30) + '" ' + s.color + ' on ' + bg(el) + ': ' + r.toFixed(2)); }
  if (/^(INPUT|SELECT|TEXTAREA)$/.test(el.tagName) && el.type !== 'hidden' && el.type !== 'checkbox') {
    var r2 = ratio(rgb(s.borderTopColor), bg(el.parentElement));
    if (r2 < 3) bad.push(el.tagName + '[' + el.name + '] border ' + s.borderTopColor + ': ' + r2.toFixed(2)); }
});
return bad;
"""


def test_live_updates_never_move_focus_or_drop_what_was_typed(browser, ui_server, workrun, write_workflow,
                                                              tmp_path: Path) -> None:
    """R-D5: on a waiting run's page (its "running for" time changes every update), a typed reason and the focus on
    the Stop button stay as the user left them; R-D2: the navigation's ticket count follows a new pending ticket
    without a reload; R-D8: at 390 px the ticket's actions are on screen."""
    from _kit.ops_apps import write_project

    ops = write_project(tmp_path / "ops")
    long = "order_with_a_long_name_that_has_no_place_to_break_" + "x" * 14  # R-D8: wrapped at 390 px, not overflowing
    wf = write_workflow("pay", f'[nodes.{long}]\nproject = "{ops}"\napp = "step"\ninput = {{ name = "order" }}\n'
                        f'[nodes.charge]\nproject = "{ops}"\napp = "step"\ninput = {{ name = "c", fail = true }}\n'
                        f'needs = ["{long}"]\non_failure = "notify"\n')
    first = workrun("run", wf, "--json")
    assert first.code == 4, first
    server = ui_server()
    browser.get(server.url.replace("/?", f"/runs/{first.json()['run_id']}?"))
    until(lambda: browser.find_elements("css selector", "#stop"), "the Stop button")
    assert browser.find_element("css selector", "#count-tickets").text == "1"

    def type_reason() -> bool:  # a live update may swap the field between finding and typing: until() tries again
        field = browser.find_element("css selector", 'form[action$="/stop"] input[name="reason"]')
        field.clear()
        field.send_keys("because R6")
        return field.get_attribute("value") == "because R6"

    until(type_reason, "the reason typed")
    browser.execute_script("document.getElementById('stop').focus();")
    before = browser.execute_script("return document.getElementById('live').getAttribute('data-updated');")
    time.sleep(2.0)  # four updates' worth
    state = browser.execute_script(
        "return [document.activeElement.id, document.querySelector('form[action$=\"/stop\"] input[name=reason]')"
        ".value, document.getElementById('live').getAttribute('data-updated')];")
    assert state == ["stop", "because R6", before], state
    assert browser.find_element("css selector", "#paused").text.startswith("newer data waits")  # and it says so
    browser.execute_script("document.activeElement.blur();"
                           "document.querySelector('form[action$=\"/stop\"] input[name=reason]').value = '';")
    until(lambda: browser.execute_script("return document.getElementById('live').getAttribute('data-updated');")
          != before, "updates to go on once nothing is being typed")
    until(lambda: not browser.find_elements("css selector", "#paused"), "the notice to go")
    # a click leaves the focus on a button (here the graph's zoom): updates go on, the focus and the zoom stay
    until(lambda: browser.find_element("css selector", '[data-zoom="1.25"]').click() or True,
          "a click on the zoom (a live update may swap it between finding and clicking)")
    zoomed = browser.execute_script("return document.querySelector('svg.graph').getAttribute('width');")
    mark = browser.execute_script("return document.getElementById('live').getAttribute('data-updated');")
    until(lambda: browser.execute_script("return document.getElementById('live').getAttribute('data-updated');")
          != mark, "updates to go on with the focus on a button")
    assert browser.execute_script("return [document.activeElement.getAttribute('data-zoom'), document.querySelector("
                                  "'svg.graph').getAttribute('width')];") == ["1.25", zoomed]
    assert workrun("run", wf, "--json").code == 4
    until(lambda: browser.find_element("css selector", "#count-tickets").text == "2", "the ticket count, live")
    try:
        browser.set_window_size(390, 844)
        browser.get(server.url.replace("/?", "/tickets?"))
        until(lambda: browser.find_elements("css selector", "table.tickets"), "the tickets page")
        off = offscreen(browser, "main button, .filters select, .filters input")
        assert off == [], off
        browser.get(server.url.replace("/?", f"/runs/{first.json()['run_id']}?"))
        until(lambda: browser.find_elements("css selector", "#stop"), "the run page at 390 px")
        wide = browser.execute_script("return [document.documentElement.scrollWidth, "
                                      "document.documentElement.clientWidth];")
        assert wide[0] <= wide[1], wide  # nothing makes the page scroll sideways
    finally:
        browser.set_window_size(1280, 900)


def test_lists_apps_and_error_pages_follow_the_journal(browser, ui_server, workrun) -> None:
    """R-U3: the Runs, Compensations and Apps pages show a run started from the CLI without a reload, their
    untouched filters notwithstanding; R-D5: an error page says "disconnected" when its server stops."""
    from conftest import stop_server  # type: ignore[import-not-found]

    first = workrun("run", TUTORIAL, "--json")
    assert first.code == 1, first
    server = ui_server()
    browser.get(server.url)
    until(lambda: first.json()["run_id"] in browser.find_element("css selector", "#live").text, "the first run")
    browser.execute_script("window.__sameDocument = 7;")
    time.sleep(1.5)  # three updates' worth: the journal did not change, so the page was not swapped (a click
    assert attr(browser, "#live", "data-updated") is None  # made then is never lost to a swap)

    def live_text() -> str:
        return browser.execute_script("return document.getElementById('live').innerText;")

    for page in ("/", "/compensations"):
        if page != "/":
            browser.get(server.url.replace("/?", f"{page}?"))
            until(lambda: first.json()["run_id"] in live_text(), f"{page} to load")
            browser.execute_script("window.__sameDocument = 7;")
        assert browser.find_elements("css selector", "#live select"), "the page's filters are what is tested"
        again = workrun("run", TUTORIAL, "--json")
        assert again.code == 1, again
        until(lambda: again.json()["run_id"] in live_text(), f"the new run on {page} without a reload")
        assert browser.execute_script("return window.__sameDocument;") == 7
    browser.get(server.url.replace("/?", "/apps?"))
    calls = until(lambda: re.search(r"(\d+) calls", live_text()), "the Apps page")
    browser.execute_script("window.__sameDocument = 8;")
    assert workrun("run", TUTORIAL, "--json").code == 1
    until(lambda: f"{int(calls.group(1)) + 1} calls" in live_text(), "the Apps page's call count, live")
    assert browser.execute_script("return window.__sameDocument;") == 8
    browser.get(server.url.replace("/?", "/runs/no-such-run?"))
    until(lambda: browser.find_elements("css selector", ".error-line"), "the error page")
    stop_server(server)
    until(lambda: browser.find_elements("css selector", "#disconnected"), "disconnected on an error page", timeout=3.5)


def test_focus_on_a_link_that_goes_away_moves_to_no_other(browser, ui_server, make_project, marker_project,
                                                          write_workflow, workrun) -> None:
    """R-D5: the roll-up's link to the failed compensation has the focus when an operator resolves it from the
    CLI: the link goes away, and the focus does not land on another link to the same place (the compensation
    order's)."""
    _, r = _failed_booking(make_project, marker_project, write_workflow, workrun)
    book = next(op["compensation"]["compensation_id"] for op in r.json()["operations"] if op["node_key"] == "book")
    server = ui_server()
    browser.get(server.url.replace("/?", f"/runs/{r.json()['run_id']}?"))
    until(lambda: browser.find_elements("css selector", "#rollup a"), "the roll-up's link")
    assert len(browser.find_elements("css selector", f'#live a[href="#c-{book}"]')) >= 2  # the case in question
    browser.execute_script("document.querySelector('#rollup a').focus();")
    assert workrun("compensations", "resolve", book, "--note", "done by hand").code == 0
    until(lambda: not browser.find_elements("css selector", "#rollup a"), "the roll-up without its link")
    time.sleep(1.0)  # two more updates
    focused = browser.execute_script("var a = document.activeElement; return [a.tagName, a.getAttribute('href')];")
    assert focused == ["BODY", None], focused


def test_a_long_word_never_widens_the_page(browser, ui_server, workrun) -> None:
    """R-D8 in spirit (dashboard review): a long text without spaces (an input, an error, a token) wraps at a
    desktop width too; it made a run page 2,227 px wide at 1280."""
    r = workrun("run", TUTORIAL, "--input", "note=" + "x" * 400, "--json")
    assert r.code == 1, r
    [cid] = [o["compensation"]["compensation_id"] for o in r.json()["operations"] if o["compensation"]]
    assert workrun("compensations", "note", cid, "--", "y" * 1500).code == 0  # the form takes 2000 characters
    server = ui_server()
    browser.set_window_size(1280, 900)
    for page in (f"/runs/{r.json()['run_id']}", "/compensations"):
        browser.get(server.url.replace("/?", f"{page}?"))
        until(lambda: "yyyy" in browser.page_source, f"the note on {page}")
        wide, window = browser.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth];")
        assert wide <= window, (page, wide, window)
