"""The CLI's JSON documents (issue 33): ``pretty_json`` writes exactly what ``json.dumps(indent=2,
ensure_ascii=False)`` writes, or raises what it raises."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workrun.cli.output import pretty_json

_SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
            | st.text())
_KEYS = st.text() | st.integers() | st.floats() | st.booleans() | st.none()
_JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                     | st.dictionaries(_KEYS, inner, max_size=4), max_leaves=30)


def _json(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


@settings(max_examples=400, deadline=None)
@given(_JSON)
def test_same_text_as_json(value: object) -> None:
    assert pretty_json(value) == _json(value)


@pytest.mark.parametrize("value", [
    {}, [], (), "", 0, -0.0, math.nan, -math.inf, True, None, {"a": {}, "b": []}, [[[]]],
    {"é\n\"\\\u2028": ["\x00", "😀"]}, {1: 2, 2.5: 3, False: 4, None: 5},
    {"nested": [{"k": [1, 2.0, None]}, {"l": {"m": "n"}}]},
])
def test_edge_values(value: object) -> None:
    assert pretty_json(value) == _json(value)


class _Number(int):
    pass


class _Text(str):
    pass


def test_subclasses_as_json_writes_them() -> None:
    value = {_Text("k"): [_Number(7), _Text("v")], "d": type("D", (dict,), {})(a=1)}
    assert pretty_json(value) == _json(value)


@pytest.mark.parametrize("value", [{"s": {1, 2}}, {(1, 2): "tuple key"}, [object()], {"b": b"bytes"}])
def test_what_json_refuses_raises_jsons_error(value: object) -> None:
    with pytest.raises(TypeError) as ours:
        pretty_json(value)
    with pytest.raises(TypeError) as theirs:
        _json(value)
    assert str(ours.value) == str(theirs.value)


def test_a_cycle_is_jsons_error() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        pretty_json(loop)


def test_a_driven_run_that_was_stopped_says_what_was_not_undone(capsys: pytest.CaptureFixture[str]) -> None:
    """R-L6: `run`'s table of a stopped run ends with the roll-up line `runs show` prints."""
    from workrun.cli.session import print_run

    view = {"run_id": "run_abc", "workflow": "w", "status": "stopped", "nodes": [], "operations": [],
            "compensation": "not_undone", "compensation_counts": {"calls": 2}, "unfinished_compensations": [],
            "tickets": []}
    print_run(view, json_mode=False)
    assert "not undone: 2 calls — workrun compensate run_abc" in capsys.readouterr().out


def test_under_json_logs_every_line_a_worker_says_is_json(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """R-F6 (conformance review): a worker's own notices (a lost call claim, a failed heartbeat) and its final
    error are JSON lines under ``--log-format json``, plain lines otherwise."""
    import json

    from workrun.cli.output import print_error
    from workrun.core import logs

    logs.say("heartbeat_failed", "warning", "heartbeat failed: x", prefix="workrun worker wkr_1")
    assert capsys.readouterr().err == "workrun worker wkr_1: heartbeat failed: x\n"
    monkeypatch.setitem(logs._STATE, "on", True)
    monkeypatch.setitem(logs._STATE, "worker", "wkr_1")
    logs.say("claim_lost", "warning", "lost the claim on call cmp_0123456789ab-1", compensation_id="cmp_0123456789ab")
    print_error("lost the connection to the journal's database")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(x["event"], x["worker"], x.get("compensation_id")) for x in lines] == [
        ("claim_lost", "wkr_1", "cmp_0123456789ab"), ("error", "wkr_1", None)]
    assert lines[1]["message"] == "lost the connection to the journal's database"


def test_plain_log_lines_of_two_threads_never_share_a_line(monkeypatch):
    """Crash review: a worker's executor and its scheduler told two things at once and one line held both (the
    text and its newline were two writes). Each line is now written whole."""
    import io
    import sys
    import threading
    import time

    from workrun.core import logs

    class Slow(io.StringIO):
        def write(self, s: str) -> int:  # a slow stream: another thread gets in between two writes
            time.sleep(0.0005)
            return super().write(s)

    out = Slow()
    monkeypatch.setattr(sys, "stderr", out)
    monkeypatch.setattr(logs, "enabled", lambda: False)

    def tell(who: str) -> None:
        for i in range(40):
            logs.say("x", "warning", f"{who} {i}")

    threads = [threading.Thread(target=tell, args=(w,)) for w in ("one", "two")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = out.getvalue().splitlines()
    assert len(lines) == 80 and all(line.startswith("workrun: ") and line.count("workrun: ") == 1 for line in lines)
