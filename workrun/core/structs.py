"""Plain data classes without generated code: ``@struct`` for the records a command builds on its start (SPEC §24).

``@struct`` (``@struct(frozen=True)``) reads a class's annotations as :func:`dataclasses.dataclass` does and
gives it ``__init__`` (positional or keyword arguments in field order, defaults and ``field(default_factory=...)``),
``__repr__``, ``__eq__`` (same class, equal fields) and, when frozen, ``__hash__`` and attributes that cannot be
set. :func:`asdict` and :func:`replace` work as :mod:`dataclasses`' do.

Why not :mod:`dataclasses`: it writes each class's methods as source text and compiles them, ~0.5 ms per class,
and imports :mod:`inspect` (with ``ast``, ``dis``, ``tokenize``): 24 classes on the path of ``workrun run``
cost ~18 ms of its start on a 2-core machine (issue 33). Here the methods are the same functions for every class,
reading its field list; creating a class costs ~10 µs, an instance ~1 µs more than a dataclass's.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform

__all__ = ["FrozenError", "asdict", "field", "replace", "struct"]

_MISSING: Any = object()
_T = TypeVar("_T")


class FrozenError(AttributeError):
    """Raised on setting or deleting an attribute of a frozen struct."""


class _Field:
    __slots__ = ("default", "default_factory", "name")

    def __init__(self, default: Any, default_factory: Callable[[], Any] | None) -> None:
        self.default, self.default_factory, self.name = default, default_factory, ""


def field(*, default: Any = _MISSING, default_factory: Callable[[], Any] | None = None) -> Any:
    """A field's default (``default``) or a function making a new one for each instance (``default_factory``).

    Raises:
        ValueError: both given.
    """
    if default is not _MISSING and default_factory is not None:
        raise ValueError("give a field a default or a default_factory, not both")
    return _Field(default, default_factory)


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    fields: tuple[_Field, ...] = type(self).__struct_fields__
    if len(args) > len(fields):
        raise TypeError(f"{type(self).__name__}() takes {len(fields)} arguments, {len(args)} given")
    set_ = object.__setattr__
    for f, value in zip(fields, args, strict=False):
        if f.name in kwargs:
            raise TypeError(f"{type(self).__name__}() got multiple values for argument {f.name!r}")
        set_(self, f.name, value)
    for f in fields[len(args):]:
        if f.name in kwargs:
            set_(self, f.name, kwargs.pop(f.name))
        elif f.default_factory is not None:
            set_(self, f.name, f.default_factory())
        elif f.default is not _MISSING:
            set_(self, f.name, f.default)
        else:
            raise TypeError(f"{type(self).__name__}() missing required argument {f.name!r}")
    if kwargs:
        raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {next(iter(kwargs))!r}")
    post = getattr(self, "__post_init__", None)
    if post is not None:
        post()


def _values(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, f.name) for f in type(self).__struct_fields__)


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    parts = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in type(self).__struct_fields__)
    return f"{type(self).__qualname__}({parts})"


def _eq(self: Any, other: Any) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self: Any) -> int:
    return hash(_values(self))


def _frozen_set(self: Any, name: str, value: Any) -> None:
    raise FrozenError(f"cannot assign to field {name!r}: {type(self).__name__} is frozen")


def _frozen_del(self: Any, name: str) -> None:
    raise FrozenError(f"cannot delete field {name!r}: {type(self).__name__} is frozen")


@dataclass_transform(field_specifiers=(field,))
def struct(cls: type[_T] | None = None, *, frozen: bool = False) -> Any:
    """Make ``cls`` a plain data class (see the module); ``frozen``: its fields cannot be set after ``__init__``
    and it is hashable (by its fields)."""

    def wrap(klass: type[_T]) -> type[_T]:
        fields: dict[str, _Field] = {}
        for base in reversed(klass.__mro__[1:]):
            if hasattr(base, "__struct_fields__") and getattr(base, "__struct_frozen__", False) != frozen:
                raise TypeError(f"{klass.__name__}: a struct is frozen exactly when its base struct is")
            for f in getattr(base, "__struct_fields__", ()):
                fields[f.name] = f
        for name, annotation in klass.__dict__.get("__annotations__", {}).items():
            if "ClassVar" in str(annotation):
                continue
            value = klass.__dict__.get(name, _MISSING)
            if isinstance(value, (list, dict, set)):
                raise ValueError(f"{klass.__name__}.{name}: a mutable default ({type(value).__name__}) would be "
                                 "shared by every instance: use field(default_factory=...)")
            f = value if isinstance(value, _Field) else _Field(value, None)
            f.name = name
            fields[name] = f  # a field a base has keeps its place, as in a dataclass
            if isinstance(value, _Field):
                if f.default is _MISSING:
                    delattr(klass, name)
                else:
                    setattr(klass, name, f.default)
        defaulted = False
        for f in fields.values():
            has_default = f.default is not _MISSING or f.default_factory is not None
            if defaulted and not has_default:
                raise TypeError(f"{klass.__name__}.{f.name}: a field without a default follows one with a default")
            defaulted = defaulted or has_default
        methods: dict[str, Any] = {"__struct_fields__": tuple(fields.values()), "__struct_frozen__": frozen,
                                   "__init__": _init,
                                   "__repr__": _repr, "__eq__": _eq, "__match_args__": tuple(fields)}
        if frozen:
            methods.update(__hash__=_hash, __setattr__=_frozen_set, __delattr__=_frozen_del)
        else:
            methods["__hash__"] = None  # mutable and compared by value: unhashable, as a dataclass
        for name, value in methods.items():
            setattr(klass, name, value)
        return klass

    return wrap(cls) if cls is not None else wrap


def asdict(obj: Any) -> dict[str, Any]:
    """A struct's fields as a dict, nested structs, lists, tuples and dicts copied recursively."""
    return {f.name: _plain(getattr(obj, f.name)) for f in type(obj).__struct_fields__}


def _plain(value: Any) -> Any:
    if hasattr(type(value), "__struct_fields__"):
        return asdict(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return type(value)(_plain(v) for v in value) if not hasattr(value, "_fields") else \
            type(value)(*(_plain(v) for v in value))
    if isinstance(value, dict):
        kind: Any = type(value)
        items = {_plain(k): _plain(v) for k, v in value.items()}
        factory = getattr(value, "default_factory", _MISSING)  # a defaultdict stays one
        return kind(items) if factory is _MISSING else kind(factory, items)
    import copy  # anything else is copied as dataclasses.asdict copies it

    return copy.deepcopy(value)


def replace(obj: _T, **changes: Any) -> _T:
    """A new struct like ``obj`` with ``changes``' fields replaced."""
    values = {f.name: getattr(obj, f.name) for f in type(obj).__struct_fields__}  # type: ignore[attr-defined]
    unknown = set(changes) - set(values)
    if unknown:
        raise TypeError(f"{type(obj).__name__} has no field {sorted(unknown)[0]!r}")
    values.update(changes)
    return type(obj)(**values)
