"""workrun.core.shape: strict TOML-typed config tables (SPEC §17), the validator of every config model (SPEC §24)."""

from __future__ import annotations

import pickle
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workrun.core.models import (
    NODE_MODELS,
    AppSpec,
    FailurePolicy,
    HttpAction,
    HttpNode,
    ProcessNode,
    WorkflowSpec,
)
from workrun.core.shape import Field, Shape, ShapeError
from workrun.runner.apps import shape_error


class Inner(Shape):
    """A nested table."""

    n: int = Field(default=1, ge=1, le=9)


class Outer(Shape):
    """A table of every supported type."""

    name: str = Field(min_length=2)
    mode: Literal["a", "b"] = "a"
    ratio: float = Field(default=0.5, gt=0)
    flag: bool = False
    tags: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    inner: Inner | None = None
    items: dict[str, Inner] = Field(default_factory=dict)
    body: dict[str, Any] | str | None = None
    sender: str = Field(default="x@y", alias="from")


def errors_of(model: type[Shape], value: Any) -> list[tuple[str, str]]:
    with pytest.raises(ShapeError) as caught:
        model.model_validate(value)
    return [(".".join(map(str, e["loc"])), e["msg"]) for e in caught.value.errors()]


def test_strict_toml_types_never_converted():
    assert errors_of(Outer, {"name": "ab", "ratio": "1"}) == [("ratio", "must be a number, not a string ('1')")]
    assert errors_of(Outer, {"name": "ab", "flag": 1}) == [("flag", "must be a boolean (true or false), not an integer")]
    assert errors_of(Inner, {"n": True}) == [("n", "must be an integer, not a boolean")]
    assert errors_of(Inner, {"n": 2.0}) == [("n", "must be an integer, not a float")]
    made = Outer.model_validate({"name": "ab", "ratio": 2})
    assert made.ratio == 2.0 and type(made.ratio) is float  # an integer is a fine number


def test_every_error_in_field_order_unknown_keys_last():
    assert errors_of(Outer, {"zz": 1, "mode": "c", "tags": ["x", 3], "inner": {"n": 0}, "items": {"k": {"m": 1}}}) == [
        ("name", "is required"),
        ("mode", "must be 'a' or 'b', not a string ('c')"),
        ("tags.1", "must be a string, not an integer"),
        ("inner.n", "must be greater than or equal to 1, not 0"),
        ("items.k.m", "unknown key"),
        ("zz", "unknown key"),
    ]


def test_bounds_and_lengths():
    assert errors_of(Outer, {"name": "a"}) == [("name", "must have at least 2 characters, not 1")]
    assert errors_of(Outer, {"name": "ab", "ratio": 0}) == [("ratio", "must be greater than 0, not 0")]
    assert errors_of(Inner, {"n": 10}) == [("n", "must be less than or equal to 9, not 10")]


def test_a_union_of_a_table_and_a_string_names_both():
    assert errors_of(Outer, {"name": "ab", "body": 3}) == [("body", "must be a table or a string, not an integer")]
    assert Outer.model_validate({"name": "ab", "body": "t"}).body == "t"
    assert Outer.model_validate({"name": "ab", "body": {"a": [1]}}).body == {"a": [1]}


def test_alias_written_and_read_either_way():
    by_alias = Outer.model_validate({"name": "ab", "from": "a@b"})
    assert by_alias.sender == "a@b" == Outer.model_validate({"name": "ab", "sender": "a@b"}).sender
    assert by_alias.model_dump(by_alias=True)["from"] == "a@b" and "sender" in by_alias.model_dump()
    assert errors_of(Outer, {"name": "ab", "from": 1}) == [("from", "must be a string, not an integer")]


def test_frozen_copy_and_fields_set():
    made = Outer.model_validate({"name": "ab", "tags": ["t"]})
    with pytest.raises(TypeError):
        made.name = "cd"  # type: ignore[misc]
    assert made.model_fields_set == {"name", "tags"}
    copy = made.model_copy(update={"flag": True})
    assert copy.flag and not made.flag and copy.model_fields_set == {"name", "tags", "flag"}
    assert copy != made and made == Outer.model_validate({"name": "ab", "tags": ["t"]})
    assert pickle.loads(pickle.dumps(made)) == made
    assert Outer.model_construct(name="zz").model_fields_set == {"name"}


def test_defaults_are_new_each_time():
    a, b = Outer.model_validate({"name": "ab"}), Outer.model_validate({"name": "ab"})
    assert a.tags == [] and a.tags is not b.tags


def test_hooks_before_and_after_report_at_their_place():
    # an App's after-check, an action's before-sugar and a node's on_failure before-parse (R-K3, R-W7)
    assert errors_of(AppSpec, {"name": "a", "entry": "m.py", "warm": True}) == [
        ("", 'warm = true applies to Tool Apps only (kind = "tool")')]
    assert errors_of(AppSpec, {"name": "a", "entry": "m.py", "compensation": {"entry": "c.py", "http": {
        "method": "GET", "url": "http://x"}}}) == [
        ("compensation", "give exactly one of entry (a script) and http (a reverse action)")]
    assert errors_of(HttpAction, {"sms": {"connector": "c", "template_id": "t"}}) == [
        ("sms.recipients", 'is required: ["+15550100", …] (strings)')]
    assert errors_of(HttpAction, {"sms": {"template_id": 3, "recipients": [], "foo": 1}}) == [  # each, at its key
        ("sms.foo", "unknown key (connector, template_id, recipients, fields)"),
        ("sms.connector", 'is required: "NAME", a [connectors.NAME] of the workflow'),
        ("sms.template_id", "is required: a string")]
    assert errors_of(ProcessNode, {"key": "a", "on_failure": "nope"})[0][0] == "on_failure"
    assert errors_of(ProcessNode, {"key": "a", "needs": ["b", "b"]}) == [("needs", "lists a node twice")]


def test_a_shape_error_becomes_one_line_naming_file_and_field():
    with pytest.raises(ShapeError) as caught:
        HttpNode.model_validate({"key": "a", "kind": "http", "method": "GET", "url": "http://x", "timeout": "60"})
    err = shape_error(caught.value, "wf.toml", "nodes.a")
    assert str(err) == "wf.toml: nodes.a.timeout: must be a number, not a string ('60')"


def test_the_journaled_spec_comes_back_equal():
    """A workflow written to the journal as JSON validates back to an equal spec (resume, R-R1): each node by its
    ``kind`` (none is a process node) and ``on_failure`` from its written form."""
    nodes = {"a": ProcessNode.model_validate({"key": "a", "project": "/p", "app": "x",
                                              "on_failure": {"retry": {"attempts": 2}, "then": "notify"}}),
             "b": HttpNode.model_validate({"key": "b", "kind": "http", "method": "POST", "url": "http://x",
                                           "compensation": {"sms": {"connector": "c", "template_id": "t",
                                                                    "recipients": ["+1"]}}})}
    spec = WorkflowSpec.model_construct(name="w", path="/w.toml", nodes=nodes)
    again = WorkflowSpec.model_validate(spec.model_dump(mode="json"))
    assert again == spec and again.nodes["a"].on_failure.exhausted == "notify"
    assert isinstance(again.nodes["b"], HttpNode) and again.nodes["b"].compensation.kind == "sms"


toml_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["", "x", "GET", "http", "process", "fail", "http://127.0.0.1/x", "always"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["key", "kind", "method", "url", "needs", "on_failure", "timeout", "retry", "attempts",
                         "sms", "email", "update_data", "input", "compensation", "entry", "http", "zz"]),
        inner, max_size=5),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(sorted(NODE_MODELS)), table=st.dictionaries(
    st.sampled_from(["kind", "method", "url", "needs", "on_failure", "timeout", "input", "compensation", "body",
                     "headers", "connector", "tools", "script", "project", "app", "zz"]), toml_values, max_size=6))
def test_any_table_is_a_node_or_a_shape_error(kind, table):
    """Property: whatever a table holds, validating it gives a node whose dump validates back to an equal node,
    or a ShapeError whose every error has a location and a message; never another exception."""
    model = NODE_MODELS[kind]
    try:
        node = model.model_validate({**table, "key": "a", "kind": kind})
    except ShapeError as exc:
        assert exc.errors() and all(isinstance(e["msg"], str) and e["msg"] for e in exc.errors())
        return
    assert model.model_validate(node.model_dump(mode="json")) == node
    assert isinstance(node.on_failure, FailurePolicy)


def test_the_json_schema_has_bounds_defaults_and_refs():
    schema = Outer.model_json_schema()
    props = schema["properties"]
    assert schema["required"] == ["name"] and schema["additionalProperties"] is False
    assert props["ratio"] == {"default": 0.5, "exclusiveMinimum": 0, "title": "Ratio", "type": "number"}
    assert props["inner"] == {"anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}], "default": None}
    assert props["from"]["title"] == "From" and props["tags"]["items"] == {"type": "string"}
    assert schema["$defs"]["Inner"]["properties"]["n"]["maximum"] == 9


def test_toml_dates_and_times_dump_to_json_as_iso_strings():
    """A TOML date or time in a free-form table (a node's ``input``, a request ``body``) is journaled as pydantic
    wrote it: ISO 8601, ``Z`` for UTC (hostile review: it was an internal error and a run left running)."""
    import tomllib

    table = tomllib.loads('input = { d = 1979-05-27, t = 07:32:00.5, z = 1979-05-27T07:32:00Z, '
                          'o = 1979-05-27T00:32:00-07:00, l = [1979-05-28] }')
    node = ProcessNode.model_validate({"key": "a", **table})
    assert node.model_dump(mode="json")["input"] == {"d": "1979-05-27", "t": "07:32:00.500000",
                                                     "z": "1979-05-27T07:32:00Z", "o": "1979-05-27T00:32:00-07:00",
                                                     "l": ["1979-05-28"]}
    # the loaded value is the string already, not only its dump: a run uses it before anything is dumped (a date
    # in a node's input failed the run's first journal write, adversarial review)
    assert node.input["d"] == "1979-05-27" and node.model_dump()["input"]["l"] == ["1979-05-28"]
    app = AppSpec.model_validate({"name": "a", "entry": "m.py", "compensation": {"http": {
        "method": "POST", "url": "http://x", "body": {"since": table["input"]["d"]}}}})
    assert app.model_dump(mode="json")["compensation"]["http"]["body"] == {"since": "1979-05-27"}


def test_edge_values_are_errors_of_the_field_not_internal_errors():
    assert errors_of(Outer, {"name": "ab", "ratio": 10**400}) == [("ratio", "must be a number, not an integer")]
    import datetime

    assert errors_of(Outer, {"name": "ab", "ratio": datetime.date(2024, 1, 2)}) == [
        ("ratio", "must be a number, not a date")]
    # a field written under its alias and its name: the name is an unknown key (as pydantic had it)
    assert errors_of(Outer, {"name": "ab", "from": "a@b", "sender": 1}) == [("sender", "unknown key")]
    import enum

    class Colour(str, enum.Enum):
        RED = "red"

    assert Outer.model_validate({"name": Colour.RED}).name == "red"  # a str subclass is a string
    err = ShapeError([{"type": "missing", "loc": ("a",), "msg": "is required", "input": {}}])
    assert pickle.loads(pickle.dumps(err)).errors() == err.errors()


def test_the_json_schema_keys_are_sorted_as_pydantic_wrote_them():
    """``workrun schema`` prints the same text as before: keys sorted at every level but a ``properties`` table's
    (the fields' order) and a ``default``'s."""
    schema = HttpNode.model_json_schema()
    assert list(schema) == sorted(schema)
    assert list(schema["properties"])[:3] == ["key", "needs", "on_failure"]
    assert list(schema["properties"]["timeout"]) == ["default", "exclusiveMinimum", "maximum", "title", "type"]


def test_dates_in_a_workflows_inputs_are_iso_strings_once_loaded(tmp_path):
    """New-user review: ``[inputs] when = 2024-01-02`` passed ``check`` and was an internal error at ``run``."""
    import json

    from workrun.config.workflow import load_workflow
    from workrun.nodes import default_checkers

    wf = tmp_path / "wf.toml"
    wf.write_text('[inputs]\nwhen = 2024-01-02\nat = 10:30:00\n[nodes.a]\nkind = "http"\nmethod = "POST"\n'
                  'url = "http://127.0.0.1:9/x"\nbody = { when = "{{ inputs.when }}", at = "{{ inputs.at }}" }\n'
                  'http_allow = ["127.0.0.1"]\n'.replace('http_allow = ["127.0.0.1"]\n', ""))
    spec, values = load_workflow(wf, {}, default_checkers())
    assert spec.inputs == {"when": "2024-01-02", "at": "10:30:00"} and values["when"] == "2024-01-02"
    json.dumps(spec.model_dump(mode="json"))


def test_every_error_of_a_table_is_reported_not_only_its_first(tmp_path):
    """R-L1: ``check`` and ``run`` give every error, one line each (new-user review: a node with a bad method, a
    string timeout and a misspelled key said only the first)."""
    from workrun.config.workflow import load_workflow
    from workrun.core.errors import ConfigError
    from workrun.nodes import default_checkers

    wf = tmp_path / "wf.toml"
    wf.write_text('[nodes.b]\nkind = "http"\nmethod = "FETCH"\nurl = "http://127.0.0.1/x"\ntimeout = "5"\ncolour = 1\n')
    with pytest.raises(ConfigError) as caught:
        load_workflow(wf, {}, default_checkers())
    assert [line.split(": ", 2)[1] for line in caught.value.lines()] == [
        "nodes.b.method", "nodes.b.timeout", "nodes.b.colour"]


def test_an_unknown_key_close_to_a_missing_one_says_what_was_meant_once():
    """New-user review: ``entyr = …`` said "entry: is required" first and "entyr: unknown key" after; now one line
    at the typo says what was meant, and a key far from every field gets no guess."""
    assert errors_of(Outer, {"nmae": "ab"}) == [("nmae", "unknown key (did you mean 'name'?)")]
    assert errors_of(Outer, {"name": "ab", "flga": True, "zz": 1}) == [
        ("flga", "unknown key (did you mean 'flag'?)"), ("zz", "unknown key")]
