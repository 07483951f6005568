"""``workrun_sdk._lightjson``: the call files' JSON without importing json (issue 33). Every value read and text
written must be json's own, and so must every error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workrun_sdk import _lightjson, _wire

SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=20)


def _outcome(call, *args, **kwargs):
    try:
        return ("value", repr(call(*args, **kwargs)))
    except (TypeError, ValueError, RecursionError) as exc:
        return (type(exc).__name__, str(exc))


@settings(max_examples=300, deadline=None)
@given(VALUES, st.booleans(), st.booleans())
def test_dumps_writes_what_json_writes_or_fails_as_json_does(value, ensure_ascii, allow_nan):
    assert _outcome(_lightjson.dumps, value, ensure_ascii=ensure_ascii, allow_nan=allow_nan) == \
        _outcome(json.dumps, value, ensure_ascii=ensure_ascii, allow_nan=allow_nan)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_loads_reads_what_json_reads(value):
    text = json.dumps(value)
    assert _outcome(_lightjson.loads, text) == _outcome(json.loads, text)
    spaced = " \n\t" + json.dumps(value, indent=2) + "\r\n "
    assert _outcome(_lightjson.loads, spaced) == _outcome(json.loads, spaced)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet='{}[]",:0123456789.eE+-truefalsnNIiy \t\n\r\\u\ufeffx', max_size=20))
def test_loads_refuses_what_json_refuses_with_its_error(text):
    assert _outcome(_lightjson.loads, text) == _outcome(json.loads, text)


@pytest.mark.parametrize("text", ["1e999", "NaN", "-Infinity", "[1e999]", '"\\ud800"', "{\"a\": 1} x", "", "[1,]"])
def test_the_strict_reader_keeps_its_refusals(text):
    """``loads_strict`` (the runner's and the App's reader of call files) still refuses what no other reader takes."""
    with pytest.raises(ValueError):
        _wire.loads_strict(text)


def test_other_kinds_of_values_fail_as_json_does():
    for value in ({1, 2}, {(1, 2): 3}, object(), b"x"):
        assert _outcome(_lightjson.dumps, value) == _outcome(json.dumps, value)
    circular: list[object] = []
    circular.append(circular)
    assert _outcome(_lightjson.dumps, circular) == _outcome(json.dumps, circular)
    assert _lightjson.loads(b'{"a": 1}') == {"a": 1}  # bytes: through json itself


def test_a_spawned_call_imports_neither_json_nor_re_nor_importlib():
    """The spawn launcher's supervisor and a ``workrun_sdk.process`` App import no json, re or importlib (~9 ms
    of every spawned call). ``-S``: no site packages' ``.pth`` files, which import what they like."""
    root = Path(__file__).parents[1]
    probe = (f"import sys\nsys.path.insert(0, {str(root)!r})\nfrom workrun_sdk import _supervise, process\n"
             "from workrun_sdk import compensation\n"
             "print(sorted(m for m in ('json', 're', 'enum', 'importlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_constants_are_shared_as_jsons_are():
    """Hostile review: json hands out one NaN object, so ``[NaN, NaN]`` reads as two equal-by-identity items."""
    ours, theirs = _lightjson.loads("[NaN, NaN, Infinity]"), json.loads("[NaN, NaN, Infinity]")
    assert (ours[0] is ours[1]) == (theirs[0] is theirs[1]) and (ours == ours) == (theirs == theirs)


def test_hooks_need_no_hash_and_are_never_mixed_up():
    """Hostile review: hooks were a cache key (an unhashable one failed; two equal ones shared a scanner)."""

    class Hook:
        __hash__ = None  # type: ignore[assignment]

        def __init__(self, tag: str) -> None:
            self.tag = tag

        def __eq__(self, other: object) -> bool:
            return True

        def __call__(self, text: str) -> str:
            return self.tag

    for tag in ("a", "b"):
        assert _lightjson.loads("[1.5]", parse_float=Hook(tag)) == json.loads("[1.5]", parse_float=Hook(tag)) == [tag]
    reader = _lightjson.Reader(parse_float=Hook("c"))
    assert reader.loads("1.5") == reader.loads(" 1.5 ") == "c"


def test_the_strict_reader_reads_bytes_as_json_does():
    """Hostile review: bytes go to json itself, which tells their encoding (a UTF-8 BOM, UTF-16)."""
    for raw in (b'\xef\xbb\xbf{"a": 1}', '{"a": 1}'.encode("utf-16"), b'{"a": 1}'):
        assert _wire.loads_strict(raw) == json.loads(raw) == {"a": 1}


def test_a_row_is_a_plain_dict_at_run_time():
    from workrun.core.rows import OperationRow, RunRow

    row = RunRow(run_id="run_1", status="running")
    assert type(row) is dict and row == {"run_id": "run_1", "status": "running"}
    assert type(OperationRow()) is dict
