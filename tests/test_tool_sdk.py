"""SDK unit tests for ``workrun_sdk.tool`` (R-A2, issue 5): schema derivation and decoration-time errors."""

from __future__ import annotations

from typing import Any, Optional, Union

import pytest

from workrun_sdk.tool import ToolInfo, input_schema, tool, tools_of


def _info(fn: Any) -> ToolInfo:
    return fn.__workrun_tool__


def test_scalars_lists_dicts_optional_and_defaults() -> None:
    @tool(name="t", description="  All the supported hints.  ")
    def t(s: str, i: int, f: float, b: bool, names: list[str], counts: dict[str, int],
          maybe: Optional[int] = None, pipe: str | None = "x", flag: bool = False, tags: list[str] = []) -> dict:  # noqa: B006
        return {}

    info = _info(t)
    assert info.name == "t"
    assert info.description == "All the supported hints."
    assert info.input_schema == {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "i": {"type": "integer"},
            "f": {"type": "number"},
            "b": {"type": "boolean"},
            "names": {"type": "array", "items": {"type": "string"}},
            "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
            "maybe": {"type": ["integer", "null"], "default": None},
            "pipe": {"type": ["string", "null"], "default": "x"},
            "flag": {"type": "boolean", "default": False},
            "tags": {"type": "array", "items": {"type": "string"}, "default": []},
        },
        "required": ["s", "i", "f", "b", "names", "counts"],
        "additionalProperties": False,
    }
    assert t("a", 1, 1.0, True, [], {}) == {}  # the function itself is unchanged


def test_bare_containers_nested_and_unions() -> None:
    def f(a: list, b: dict, c: list[dict[str, float]], d: Optional[list[int]], e: Union[int, str], g: Any) -> None:
        pass

    props = input_schema(f)["properties"]
    assert props["a"] == {"type": "array"}
    assert props["b"] == {"type": "object"}
    assert props["c"] == {"type": "array", "items": {"type": "object", "additionalProperties": {"type": "number"}}}
    assert props["d"] == {"type": ["array", "null"], "items": {"type": "integer"}}
    assert props["e"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert props["g"] == {}


def test_string_annotations_are_resolved() -> None:
    def f(x: "int", y: "list[str]" = ()) -> None:  # type: ignore[assignment]  # noqa: UP037
        pass

    schema = input_schema(f)
    assert schema["properties"]["x"] == {"type": "integer"}
    assert schema["required"] == ["x"]


@pytest.mark.parametrize("bad_name", ["", "has space", "1starts_with_digit", "x" * 65, "dots.no", None])
def test_bad_tool_name_is_rejected_at_decoration(bad_name: Any) -> None:
    with pytest.raises(ValueError, match="@tool"):
        tool(name=bad_name, description="d")


@pytest.mark.parametrize("bad_description", ["", "   ", None, 3])
def test_empty_description_is_rejected_at_decoration(bad_description: Any) -> None:
    with pytest.raises(ValueError, match="description must be a non-empty string"):
        tool(name="ok", description=bad_description)


def _decorate(fn: Any) -> Any:
    return tool(name="bad", description="d")(fn)


def test_missing_hint() -> None:
    def f(x):  # type: ignore[no-untyped-def]
        pass

    with pytest.raises(TypeError, match=r"parameter 'x': needs a type hint"):
        _decorate(f)


@pytest.mark.parametrize("kind", ["args", "kwargs"])
def test_var_args(kind: str) -> None:
    def f_args(*a: int) -> None:
        pass

    def f_kwargs(**k: int) -> None:
        pass

    with pytest.raises(TypeError, match=r"\*args/\*\*kwargs"):
        _decorate(f_args if kind == "args" else f_kwargs)


@pytest.mark.parametrize("hint", [set, tuple[int, int], bytes, complex, object, type(None)])
def test_unsupported_hints(hint: Any) -> None:
    def f(x):  # type: ignore[no-untyped-def]
        pass

    f.__annotations__ = {"x": hint}
    with pytest.raises(TypeError, match=r"tool f: parameter 'x': unsupported type hint"):
        _decorate(f)


def test_dict_with_non_string_keys() -> None:
    def f(x: dict[int, str]) -> None:
        pass

    with pytest.raises(TypeError, match="dict keys must be str"):
        _decorate(f)


def test_positional_only_parameter() -> None:
    def f(x: int, /) -> None:
        pass

    with pytest.raises(TypeError, match="positional-only"):
        _decorate(f)


def test_default_that_is_not_json() -> None:
    def f(x: str = object()) -> None:  # type: ignore[assignment]
        pass

    with pytest.raises(TypeError, match=r"parameter 'x': default .* is not JSON"):
        _decorate(f)


def test_unresolvable_annotation() -> None:
    def f(x: "NoSuchType") -> None:  # type: ignore[name-defined]  # noqa: F821, UP037
        pass

    with pytest.raises(TypeError, match=r"tool f: cannot resolve type hints"):
        _decorate(f)


def test_not_a_function() -> None:
    with pytest.raises(TypeError, match="decorates a function"):
        _decorate(42)


def test_tools_of_finds_tools_and_rejects_duplicate_names() -> None:
    @tool(name="one", description="d")
    def a() -> dict:
        return {}

    @tool(name="one", description="d")
    def b() -> dict:
        return {}

    def plain() -> None:
        pass

    assert tools_of({"a": a, "plain": plain, "alias": a}) == {"one": a}
    with pytest.raises(ValueError, match="two tools are named 'one'"):
        tools_of({"a": a, "b": b})
