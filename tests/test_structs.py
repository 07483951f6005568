"""workrun.core.structs: plain data classes that behave as the standard library's dataclasses do (SPEC §24)."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest

from workrun.core.structs import FrozenError, asdict, field, replace, struct


@struct(frozen=True)
class Point:
    """A frozen struct."""

    x: int
    y: int = 0
    tags: tuple[str, ...] = ()


@struct
class Box:
    """A mutable struct with factories and a nested struct."""

    name: str
    items: list[Any] = field(default_factory=list)
    where: Point | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class DPoint:
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()


@dataclasses.dataclass
class DBox:
    name: str
    items: list[Any] = dataclasses.field(default_factory=list)
    where: DPoint | None = None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)


def test_init_repr_eq_hash_as_a_dataclass():
    for args, kwargs in (((1,), {}), ((1, 2), {}), ((), {"x": 1, "tags": ("a",)}), ((1,), {"y": 3})):
        ours, theirs = Point(*args, **kwargs), DPoint(*args, **kwargs)
        assert repr(ours).replace("Point", "DPoint") == repr(theirs)
        assert hash(ours) == hash(Point(*args, **kwargs)) and ours == Point(*args, **kwargs)
        assert (ours.x, ours.y, ours.tags) == (theirs.x, theirs.y, theirs.tags)
    assert Point(1) != Point(2) and Point(1) != DPoint(1) and {Point(1): "a"}[Point(1)] == "a"
    box = Box("b")
    assert box.items == [] and box.items is not Box("c").items and box == Box("b") and box != Box("c")
    with pytest.raises(TypeError):
        hash(box)  # mutable and compared by value: unhashable, as a dataclass


def test_bad_arguments_are_refused_as_a_dataclass_refuses_them():
    for call in (lambda: Point(), lambda: Point(1, 2, (), 4), lambda: Point(1, x=2), lambda: Point(1, z=2)):
        with pytest.raises(TypeError):
            call()


def test_frozen_fields_cannot_be_set_or_deleted():
    p = Point(1)
    with pytest.raises(FrozenError):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.y
    b = Box("b")
    b.name = "c"
    assert b.name == "c"


def test_asdict_and_replace_as_the_standard_library_s():
    ours = Box("b", [Point(1, 2), {"k": Point(3)}], Point(4, tags=("t",)), {"m": [1]})
    theirs = DBox("b", [DPoint(1, 2), {"k": DPoint(3)}], DPoint(4, tags=("t",)), {"m": [1]})
    assert asdict(ours) == dataclasses.asdict(theirs)
    assert asdict(ours)["meta"]["m"] is not ours.meta["m"]  # copied
    moved = replace(Point(1, 2), y=5)
    assert moved == Point(1, 5) and replace(ours, name="z").items is ours.items
    with pytest.raises(TypeError):
        replace(Point(1), z=1)


def test_a_struct_pickles_and_matches_by_position():
    assert pickle.loads(pickle.dumps(Point(1, 2))) == Point(1, 2)
    assert pickle.loads(pickle.dumps(Box("b", [1]))) == Box("b", [1])
    match Point(1, 2):
        case Point(a, b):
            assert (a, b) == (1, 2)


def test_the_guards_of_dataclasses_hold():
    """Hostile review: what dataclasses refuse at class creation, a struct refuses too; a redeclared field keeps
    its place; a struct that holds itself has a repr; asdict copies what it does not know."""
    import collections

    with pytest.raises(ValueError):
        struct(type("A", (), {"__annotations__": {"items": "list[int]"}, "items": []}))
    with pytest.raises(TypeError):
        struct(type("B", (), {"__annotations__": {"a": "int", "b": "int"}, "a": 1}))
    with pytest.raises(ValueError):
        field(default=1, default_factory=list)
    with pytest.raises(TypeError):
        struct(type("C", (Point,), {"__annotations__": {"z": "int"}, "z": 0}))  # not frozen under a frozen base

    @struct(frozen=True)
    class Moved(Point):
        x: int = 5

    assert Moved(1, 2) == Moved(x=1, y=2) and Moved.__match_args__ == ("x", "y", "tags")
    box = Box("b")
    box.items.append(box)
    assert repr(box) == "Box(name='b', items=[...], where=None, meta={})"
    kept = {1, 2}
    counts = collections.defaultdict(int, {"a": 1})
    out = asdict(Box("b", [kept], meta={"c": counts}))
    assert out["items"][0] == kept and out["items"][0] is not kept
    assert isinstance(out["meta"]["c"], collections.defaultdict) and out["meta"]["c"]["zz"] == 0
