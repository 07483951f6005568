"""``workrun schema`` (R-L4): the JSON Schemas and the loader agree on every example the project ships (the
tutorial's workflows and Apps) and on invalid ones; a workflow may start with a ``#:schema`` comment."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import jsonschema
import pytest

from workrun.config.workflow import load_workflow
from workrun.core.errors import ConfigError
from workrun.core.schema import app_schema, workflow_schema
from workrun.nodes import default_executors
from workrun.runner.apps import load_project

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / "demo_apps" / "workflows").glob("*.toml"))
PROJECTS = sorted(p.parent for p in (ROOT / "demo_apps").glob("*/pyproject.toml"))


def _validator(schema: dict) -> jsonschema.Draft202012Validator:
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_shipped_workflow_passes_the_schema_and_the_loader(path, monkeypatch):
    monkeypatch.setenv("SHOP_TOKEN", "t")
    data = tomllib.loads(path.read_text())
    errors = [e.message for e in _validator(workflow_schema()).iter_errors(data)]
    assert errors == []
    load_workflow(path, {}, default_executors(), known_inputs_only=False)


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)
def test_every_shipped_app_project_passes_the_schema_and_the_loader(project):
    table = tomllib.loads((project / "pyproject.toml").read_text())["tool"]["workrun"]
    assert [e.message for e in _validator(app_schema()).iter_errors(table)] == []
    assert load_project(project)


BAD = {
    "unknown top key": 'colour = "red"\n[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\n',
    "unknown node key": '[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\nretries = 3\n',
    "bad on_failure": '[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\non_failure = "maybe"\n',
    "unknown kind": '[nodes.a]\nkind = "carrier-pigeon"\n',
    "no nodes": 'name = "empty"\n',
    "bad retry": '[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\n'
                 'on_failure = { retry = { attempts = "three" } }\n',
    "process node without app": '[nodes.a]\nproject = "."\n',  # new-user review: the schema let it pass
    "process node without project": '[nodes.a]\napp = "x"\n',
    # hostile review: a name that would print as two lines in the run log
    "name of two lines": 'name = "a\\r\\nfake line"\n[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\n',
    # conformance review: what the loader's own checks refuse, the schema refuses too (R-L4)
    "remote agent without url": '[nodes.a]\nkind = "remote_agent"\nmessage = "hi"\n',
    "remote agent on ftp": '[nodes.a]\nkind = "remote_agent"\nurl = "ftp://127.0.0.1/"\nmessage = "hi"\n',
    "agent without tools": '[nodes.a]\nkind = "agent"\nprompt = "p"\nmodel = "scripted"\ntools = []\n',
    "script step with an unknown key": '[nodes.a]\nkind = "agent"\nprompt = "p"\nmodel = "scripted"\n'
                                       'tools = [{ project = ".", app = "t" }]\nscript = [{ tool = "x", colour = 1 }]\n',
    "connector url not relative": '[connectors.s]\nbase_url = "http://127.0.0.1:9/"\n[nodes.a]\nkind = "http"\n'
                                  'connector = "s"\nmethod = "GET"\nurl = "orders"\n',
    "relative url without a connector": '[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "/x"\n',
    "ftp url": '[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "ftp://127.0.0.1/x"\n',
    "connector base_url not http": '[connectors.s]\nbase_url = "/api"\n[nodes.a]\nkind = "http"\nmethod = "GET"\n'
                                   'url = "http://127.0.0.1:9/"\n',
    "node key of 65 characters": f'[nodes.{"a" * 65}]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\n',
    # CLI-completeness review: the schema let these pass
    "a node needed twice": '[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\n'
                           '[nodes.b]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\nneeds = ["a", "a"]\n',
    "smtp with tls and starttls": '[smtp]\nhost = "127.0.0.1"\nfrom = "a@b.c"\ntls = true\nstarttls = true\n'
                                  '[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\n',
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_what_the_schema_refuses_the_loader_refuses(name, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(BAD[name])
    assert list(_validator(workflow_schema()).iter_errors(tomllib.loads(BAD[name]))), name
    with pytest.raises(ConfigError):
        load_workflow(path, {}, default_executors())


def test_a_schema_comment_is_allowed(tmp_path):
    path = tmp_path / "wf.toml"
    path.write_text('#:schema ./workflow.schema.json\n[nodes.a]\nkind = "http"\nmethod = "GET"\n'
                    'url = "http://127.0.0.1:9/"\n')
    spec, _ = load_workflow(path, {}, default_executors())
    assert list(spec.nodes) == ["a"]


KITCHEN_SINK = """
#:schema ./workflow.schema.json
http_allow = ["127.0.0.1:9"]
[inputs]
status = "new"
[connectors.shop]
base_url = "http://127.0.0.1:9/api"
headers = { Authorization = "Bearer {{ env.SHOP_TOKEN }}" }
rate_limit = { requests = 5, per = 1 }
circuit_breaker = { failures = 3, reset = 10 }
[smtp]
host = "127.0.0.1"
port = 2525
from = "workrun@example.com"
[notify]
email = { to = ["oncall@example.com"], body = "{{ message }}" }
[nodes.order]
kind = "http"
connector = "shop"
method = "POST"
url = "/orders"
compensation = { update_data = { fields = ["status"], values = { status = "undone" } } }
[nodes.pay]
kind = "http"
method = "POST"
url = "http://127.0.0.1:9/pay/{{ data.status }}"
needs = ["order"]
on_failure = { compensate = { sms = { connector = "shop", template_id = "T1", recipients = ["+1555"] }, max_retries = 1 } }
[nodes.mail]
kind = "http"
method = "POST"
url = "http://127.0.0.1:9/x"
compensation = { email = { to = ["ops@example.com"], body = "undo {{ original.result.body.id }}" }, max_retries = 0 }
"""


def test_every_action_kind_passes_the_schema_and_the_loader(tmp_path, monkeypatch):
    """SPEC §19's connectors, [smtp], email, sms and update_data forms: schema and loader agree."""
    monkeypatch.setenv("SHOP_TOKEN", "t0ken")
    path = tmp_path / "all.toml"
    path.write_text(KITCHEN_SINK)
    assert [e.message for e in _validator(workflow_schema()).iter_errors(tomllib.loads(KITCHEN_SINK))] == []
    spec, _ = load_workflow(path, {}, default_executors())
    assert spec.nodes["order"].compensation.kind == "update_data" and spec.smtp is not None


@pytest.mark.parametrize("comp, ok", [
    ({"entry": "undo.py"}, True),
    ({"connector": "shop", "method": "DELETE", "url": "/orders/{{ original.result.id }}", "max_retries": 0}, True),
    ({"http": {"method": "DELETE", "url": "http://127.0.0.1:9/x"}}, True),
    ({"sms": {"connector": "shop", "template_id": "T1", "recipients": ["+1555"]}}, True),
    ({"email": {"to": ["ops@example.com"], "body": "undo"}}, True),
    ({"update_data": {"fields": ["st"]}}, True),
    ({"entry": "undo.py", "update_data": {"fields": ["st"]}}, False),
    ({"timeout": 3}, False),
    ({"http": {"email": {"to": ["ops@example.com"], "body": "undo"}}}, False),  # one kind, not nested in http
    ({"http": {"update_data": {"fields": ["st"]}}}, False),
    ({"http": {"sms": {"connector": "shop", "template_id": "T1", "recipients": ["+1555"]}}}, False),
])
def test_an_apps_compensation_of_every_action_kind_schema_and_model_agree(comp, ok):
    """SPEC §19: an App's ``compensation`` may be any ACTION; the schema says what the model takes."""
    from workrun.core.models import CompensationSpec
    from workrun.core.shape import ShapeError

    table = {"apps": {"a": {"entry": "main.py", "compensation": comp}}}
    assert (list(_validator(app_schema()).iter_errors(table)) == []) is ok, comp
    try:
        CompensationSpec.model_validate(comp)
    except (ShapeError, ValueError):
        taken = False
    else:
        taken = True
    assert taken is ok, comp


@pytest.mark.parametrize("text", [
    "[tool.workrun.apps]\n", '[tool.workrun.apps.a]\nentry = "main.py"\n[tool.workrun.other]\nx = 1\n',
    '[tool.workrun.apps.a]\nentry = "/etc/passwd"\n', '[tool.workrun.apps.a]\nentry = "../x.py"\n',
    # conformance review: the compensation script's path as the entry's; warm only on a Tool App
    '[tool.workrun.apps.a]\nentry = "main.py"\ncompensation = { entry = "../compensate.py" }\n',
    '[tool.workrun.apps.a]\nentry = "main.py"\ncompensation = { entry = "/tmp/compensate.py" }\n',
    '[tool.workrun.apps.a]\nentry = "main.py"\nwarm = true\n',
    '[tool.workrun.apps.a]\nkind = "process"\nentry = "main.py"\nwarm = true\n',
    # CLI-completeness review: an App name is printable text, not blank
    '[tool.workrun.apps.""]\nentry = "main.py"\n', '[tool.workrun.apps." "]\nentry = "main.py"\n',
    '[tool.workrun.apps."\\u202eevil"]\nentry = "main.py"\n',
])
def test_what_the_app_schema_refuses_the_loader_refuses(text, tmp_path):
    """R-L4: an App project's table: no Apps, a key beside ``apps``, an entry outside the project."""
    pyproject = '[project]\nname = "p"\nversion = "0"\n' + text
    assert list(_validator(app_schema()).iter_errors(tomllib.loads(pyproject)["tool"]["workrun"])), text
    (tmp_path / "pyproject.toml").write_text(pyproject)
    (tmp_path / "uv.lock").write_text("")
    (tmp_path / "main.py").write_text("")
    with pytest.raises(ConfigError):
        load_project(tmp_path)


@pytest.mark.parametrize("name", ["a", "a b", "é-1", "a\u00a0b", "a\u3000", "", " ", "\t", "x\x00", "\u202eevil",
                                  "a\u061cb", "a\u200bb", "a\u2028b", "x\x1b[31m"])
def test_the_app_schema_and_the_loader_agree_on_an_app_name(name, tmp_path):
    """R-L4 (diff review): one pattern for an App name in both, so they cannot drift apart."""
    pyproject = f'[project]\nname = "p"\nversion = "0"\n[tool.workrun.apps.{json.dumps(name)}]\nentry = "main.py"\n'
    schema_ok = not list(_validator(app_schema()).iter_errors(tomllib.loads(pyproject)["tool"]["workrun"]))
    (tmp_path / "pyproject.toml").write_text(pyproject)
    (tmp_path / "uv.lock").write_text("")
    (tmp_path / "main.py").write_text("")
    try:
        load_project(tmp_path)
        loader_ok = True
    except ConfigError:
        loader_ok = False
    assert schema_ok == loader_ok, (name, schema_ok, loader_ok)
