"""Loading workflows with http nodes and reverse actions: everything wrong is found before anything runs
(R-H1, R-H3, R-H5, R-H6; SPEC §10, §17). Pure: no server, no process."""

from __future__ import annotations

from pathlib import Path

import pytest

from workrun.config.workflow import load_workflow
from workrun.core.errors import ConfigError
from workrun.core.models import HttpNode
from workrun.core.templates import node_dependencies
from workrun.nodes import default_executors
from workrun.runner.apps import load_project

GOOD = """
http_allow = ["127.0.0.1:8765", "10.0.0.0/8"]
[inputs]
item = "book"
[nodes.order]
kind = "http"
method = "POST"
url = "https://shop.example/api/orders?item={{ inputs.item }}"
headers = { Authorization = "Bearer {{ env.WR_TEST_TOKEN }}" }
body = { item = "{{ inputs.item }}", qty = 1 }
compensation = { method = "DELETE", url = "https://shop.example/api/orders/{{ original.result.body.id }}", \
headers = { X-Run = "{{ run_id }}", X-Why = "{{ error }}" }, body = "{{ original.input.body.item }}" }
[nodes.pay]
kind = "http"
method = "POST"
url = "https://shop.example/api/payments/{{ nodes.order.result.body.id }}"
"""


def _load(tmp_path: Path, text: str) -> tuple:
    path = tmp_path / "wf.toml"
    path.write_text(text)
    return load_workflow(path, None, default_executors())


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WR_TEST_TOKEN", "x")


def test_a_good_workflow_loads_with_dependencies_from_templates(tmp_path: Path) -> None:
    spec, inputs = _load(tmp_path, GOOD)
    order, pay = spec.nodes["order"], spec.nodes["pay"]
    assert isinstance(order, HttpNode) and order.compensation is not None
    assert (order.timeout, order.compensation.max_retries, order.compensation.timeout) == (30.0, 3, 30.0)
    assert node_dependencies(pay.needs, pay.templated()) == ["order"]
    assert node_dependencies(order.needs, order.templated()) == []
    assert spec.http_allow == ["127.0.0.1:8765", "10.0.0.0/8"]


@pytest.mark.parametrize("old, new, field, words", [
    ('url = "https://shop.example/api/orders?item', 'url = "https://{{ inputs.item }}/api/orders?item',
     "nodes.order.url", "literal"),
    ('method = "POST"\nurl = "https://shop.example/api/orders', 'method = "SEND"\nurl = "https://shop.example/api/orders',
     "nodes.order.method", "GET"),
    ('WR_TEST_TOKEN', 'WR_TEST_UNSET_TOKEN', "nodes.order.headers.Authorization",
     "environment variable WR_TEST_UNSET_TOKEN is not set"),
    ('qty = 1 }', 'qty = "{{ env.WR_TEST_TOKEN }}" }', "nodes.order.body.qty", "only in header values"),
    ('X-Run = "{{ run_id }}"', 'X-Run = "{{ nodes.pay.result.body }}"', "nodes.order.compensation.headers.X-Run",
     "reverse action may use"),
    ('X-Run = "{{ run_id }}"', 'X-Run = "{{ inputs.nope }}"', "nodes.order.compensation.headers.X-Run",
     "neither in [inputs]"),
    ('url = "https://shop.example/api/orders/{{', 'url = "ftp://shop.example/api/orders/{{',
     "nodes.order.compensation.url", "only http and https"),
    ('{{ nodes.order.result.body.id }}"', '{{ nodes.order.result.id }}"', "nodes.pay.url",
     "an http node's result has status, headers, body only"),
    ('{{ nodes.order.result.body.id }}"', '{{ nodes.order.result.body.id }"', "nodes.pay.url", "'{{' without '}}'"),
    ('http_allow = ["127.0.0.1:8765", "10.0.0.0/8"]', 'http_allow = ["shop.example"]', "http_allow[0]",
     "not an address"),
    ('qty = 1 }\n', 'qty = 1 }\ntimeout = "30"\n', "nodes.order.timeout", ""),
    ('qty = 1 }\n', 'qty = 1 }\nheaders2 = 1\n', "nodes.order.headers2", "unknown key"),
    ('headers = { Authorization', 'headers = { Host = "evil.example", Authorization', "nodes.order.headers.Host",
     "set by Workrun"),
    ('url = "https://shop.example/api/orders?item', 'url = "https://shop.example/api/orders\\n?item',
     "nodes.order.url", "control character"),
    ('url = "https://shop.example/api/orders?item', 'url = "https://shop.example/api/orders\\t?item',
     "nodes.order.url", "control character"),
    ('headers = { Authorization', 'headers = { X-Note = "one\\r\\nX-Evil: two", Authorization',
     "nodes.order.headers.X-Note", "line break"),
    ('headers = { Authorization', 'headers = { X-Note = "caf\u00e9", Authorization', "nodes.order.headers.X-Note",
     "not ASCII"),
    ('headers = { X-Run', 'headers = { Idempotency-Key = "mine", X-Run', "nodes.order.compensation.headers.Idempotency-Key",
     "set by Workrun"),
    ('headers = { Authorization', 'headers = { idempotency-key = "mine", Authorization',
     "nodes.order.headers.idempotency-key", "set by Workrun"),
    ('body = { item = "{{ inputs.item }}", qty = 1 }', "body = 5", "nodes.order.body",
     "must be a table or a string, not an integer"),
    ('body = "{{ original.input.body.item }}"', "body = [1]", "nodes.order.compensation.body",
     "must be a table or a string, not an array"),
])
def test_mistakes_are_config_errors_naming_the_field(tmp_path: Path, old: str, new: str, field: str,
                                                     words: str) -> None:
    assert old in GOOD
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, GOOD.replace(old, new, 1))
    assert info.value.field == field
    assert words in info.value.message


def test_bad_workrun_http_allow_is_found_before_anything_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKRUN_HTTP_ALLOW", "127.0.0.1:8765,not-an-address")
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, GOOD)
    assert info.value.field == "WORKRUN_HTTP_ALLOW"


@pytest.mark.parametrize("compensation", [
    'entry = "undo.py", http = { method = "DELETE", url = "http://127.0.0.1:1/x" }',
    "max_retries = 2",
])
def test_app_compensation_needs_exactly_one_of_entry_and_http(tmp_path: Path, compensation: str) -> None:
    (tmp_path / "uv.lock").write_text("")
    (tmp_path / "pyproject.toml").write_text(f"""[project]\nname = "p"\nversion = "0.1.0"\n
[tool.workrun.apps.a]\nentry = "main.py"\ncompensation = {{ {compensation} }}\n""")
    with pytest.raises(ConfigError) as info:
        load_project(tmp_path)
    assert info.value.field == "tool.workrun.apps.a.compensation"
    assert info.value.detail == "give exactly one of entry (a script) and http (a reverse action)"


ACTION_USES = """
[notify]
http = { method = "POST", url = "https://hooks.example/{{ inputs.channel }}", body = { text = "{{ message }}" } }
[nodes.order]
kind = "http"
method = "POST"
url = "https://shop.example/api/orders"
compensation = { method = "DELETE", url = "https://shop.example/api/orders?reason={{ inputs.reason }}" }
[nodes.pay]
kind = "http"
method = "POST"
url = "https://shop.example/api/payments"
needs = ["order"]
on_failure = { compensate = { method = "POST", url = "https://shop.example/refund?desk={{ inputs.desk }}" } }
"""


@pytest.mark.parametrize("name", ["channel", "reason", "desk"])
def test_an_input_used_only_by_an_action_is_a_known_input(tmp_path: Path, name: str) -> None:
    """``--input NAME`` is refused only when nothing uses NAME (SPEC §17): [notify], a reverse action and an
    on_failure action are uses too."""
    others = {n: "x" for n in ("channel", "reason", "desk") if n != name}
    path = tmp_path / "wf.toml"
    path.write_text(ACTION_USES)
    _, inputs = load_workflow(path, {**others, name: "given"}, default_executors())
    assert inputs[name] == "given"
    with pytest.raises(ConfigError) as info:
        load_workflow(path, {**others, name: "given", "typo": "1"}, default_executors())
    assert info.value.field == "--input" and "'typo'" in info.value.message and name in info.value.message
