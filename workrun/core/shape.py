"""Strict, typed config tables without a validation library on the start-up path (SPEC §17, §24 R-P4).

:class:`Shape` is the base of the config models (:mod:`workrun.core.models`): a class lists its fields as
annotations (``name: type = default`` or ``= Field(...)``), and :meth:`Shape.model_validate` turns a TOML table
(or a journaled JSON object) into a frozen instance, or raises :class:`ShapeError` listing every error with its
location. The subset of types config tables use is supported: ``str``, ``int``, ``float``, ``bool``, ``Any``,
``Literal[...]``, ``X | None``, ``dict[str, X]``, ``list[X]``, another :class:`Shape`, a union of shapes told
apart by their ``kind`` literal, and ``dict[str, Any] | str``.

Why not pydantic: importing pydantic and building the models' classes was ~90 ms of the ~150 ms every ``workrun
run`` and ``workrun check`` spent before reading its workflow (issue 33; pydantic is still what typer uses for
the other commands' options). The method names (``model_validate``, ``model_dump``, ``model_copy``,
``model_construct``, ``model_fields``, ``model_fields_set``, ``model_json_schema``) and the meaning of each are
pydantic's, so a reader who knows pydantic reads the models as before.

Typing is TOML's, strictly (SPEC §17): a string where a number or boolean belongs is an error, never converted;
an integer is a fine number (kept as a float); a boolean is never a number.
"""

from __future__ import annotations

import datetime
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, TypeVar, Union

__all__ = ["Field", "Shape", "ShapeError", "jsonable", "toml_type", "typo_hints"]

_MISSING: Any = object()
_S = TypeVar("_S", bound="Shape")
_BAD: Any = object()  # a value that failed; its errors are in the list handed down


def toml_type(value: Any) -> str:
    """Name ``value``'s TOML type for a message: ``"a string ('60')"``, ``"a boolean"``, ``"an integer"``."""
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"a string ({shown!r})"
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (dict, "a table"),
                       (list, "an array"), (datetime.datetime, "a date-time"), (datetime.date, "a date"),
                       (datetime.time, "a time")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


class ShapeError(ValueError):
    """A table that does not fit its model. :meth:`errors` lists each error as ``{"type", "loc", "msg",
    "input"}``: ``loc`` is the path of keys and indexes from the validated table, ``msg`` one line for a user,
    ``type`` the kind of error (``missing``, ``extra_forbidden``, ``type``, ``value_error``, ``literal_error``,
    ``bounds``, ``too_short``)."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        self._errors = errors
        first = errors[0] if errors else {"loc": (), "msg": "invalid"}
        where = ".".join(str(p) for p in first["loc"])
        super().__init__(f"{where}: {first['msg']}" if where else first["msg"])

    def errors(self) -> list[dict[str, Any]]:
        """Every error, in the order of the fields (unknown keys last)."""
        return list(self._errors)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._errors,))


class _FieldInfo:
    """One field of a :class:`Shape`: its default (or factory), bounds, alias, hooks and JSON Schema."""

    __slots__ = ("after", "alias", "annotation", "before", "check", "default", "default_factory", "dump", "ge", "gt",
                 "le", "min_length", "name")

    def __init__(self, default: Any = _MISSING, *, default_factory: Callable[[], Any] | None = None,
                 ge: float | None = None, gt: float | None = None, le: float | None = None,
                 min_length: int | None = None, alias: str | None = None,
                 before: Callable[[Any], Any] | None = None, after: Callable[[Any], Any] | None = None,
                 dump: Callable[[Any], Any] | None = None) -> None:
        self.default, self.default_factory = default, default_factory
        self.ge, self.gt, self.le, self.min_length, self.alias = ge, gt, le, min_length, alias
        self.before, self.after, self.dump = before, after, dump
        self.name = ""
        self.annotation: Any = None
        self.check: Callable[[Any, tuple[Any, ...], list[dict[str, Any]]], Any] | None = None

    @property
    def required(self) -> bool:
        """True when the field has neither a default nor a default factory."""
        return self.default is _MISSING and self.default_factory is None

    def make_default(self) -> Any:
        """The field's default: a new value from the factory, or the default itself."""
        return self.default_factory() if self.default_factory is not None else self.default

    def key(self) -> str:
        """The key a table writes the field under (its alias, or its name)."""
        return self.alias or self.name


def Field(default: Any = _MISSING, *, default_factory: Callable[[], Any] | None = None,  # noqa: N802 (pydantic's name)
          ge: float | None = None, gt: float | None = None, le: float | None = None, min_length: int | None = None,
          alias: str | None = None, before: Callable[[Any], Any] | None = None,
          after: Callable[[Any], Any] | None = None, dump: Callable[[Any], Any] | None = None) -> Any:
    """A field with more than a default: ``ge``/``gt``/``le`` bounds of a number, ``min_length`` of a string
    or list, ``alias`` (the key written in a table; the field's name is accepted too), ``before`` (called with
    the raw value; may raise ValueError), ``after`` (called with the checked value; may raise ValueError) and
    ``dump`` (what :meth:`Shape.model_dump` writes for the value)."""
    return _FieldInfo(default, default_factory=default_factory, ge=ge, gt=gt, le=le, min_length=min_length,
                      alias=alias, before=before, after=after, dump=dump)


def _err(errors: list[dict[str, Any]], kind: str, loc: tuple[Any, ...], msg: str, value: Any) -> Any:
    errors.append({"type": kind, "loc": loc, "msg": msg, "input": value})
    return _BAD


def typo_hints(unknown: list[str], keys: list[str]) -> dict[str, str]:
    """``{unknown key: the key it is most likely a typo of}`` among ``keys`` (the table's keys not written), for
    the unknown keys that are close to one (``needz`` → ``needs``); each key is suggested once at most (R-L1: an
    error says what to write instead where it can)."""
    import difflib  # only when a table has an unknown key

    hints: dict[str, str] = {}
    for key in unknown:
        close = difflib.get_close_matches(key, [k for k in keys if k not in hints.values()], n=1, cutoff=0.75)
        if close:
            hints[key] = close[0]
    return hints


_Check = Callable[[Any, tuple[Any, ...], list[dict[str, Any]]], Any]

_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean (true or false)",
          dict: "a table", list: "an array"}


def _scalar(tp: type) -> _Check:
    """A check of a str, int, float or bool (TOML's types, strictly)."""
    wanted = _NAMES[tp]

    def check(value: Any, loc: tuple[Any, ...], errors: list[dict[str, Any]]) -> Any:
        kind = type(value)
        if kind is tp or (tp is str and isinstance(value, str)):
            return value
        if tp is float and kind is int:
            try:
                return float(value)
            except OverflowError:  # beyond a float's range (~1.8e308)
                pass
        return _err(errors, "type", loc, f"must be {wanted}, not {toml_type(value)}", value)
    return check


def _literal(choices: tuple[Any, ...]) -> _Check:
    if len(choices) == 1:
        listed = repr(choices[0])
    else:
        listed = ", ".join(repr(c) for c in choices[:-1]) + f" or {choices[-1]!r}"

    def check(value: Any, loc: tuple[Any, ...], errors: list[dict[str, Any]]) -> Any:
        if type(value) is str and value in choices:
            return value
        return _err(errors, "literal_error", loc, f"must be {listed}, not {toml_type(value)}", value)
    return check


def _nullable(inner: _Check) -> _Check:
    def check(value: Any, loc: tuple[Any, ...], errors: list[dict[str, Any]]) -> Any:
        return None if value is None else inner(value, loc, errors)
    return check


def _dict_of(inner: _Check | None) -> _Check:
    def check(value: Any, loc: tuple[Any, ...], errors: list[dict[str, Any]]) -> Any:
        if not isinstance(value, dict):
            return _err(errors, "type", loc, f"must be a table, not {toml_type(value)}", value)
        if inner is None:
            return dict(value)
        out, bad = {}, False
        for k, v in value.items():
            if type(k) is not str:
                bad = True
                _err(errors, "type", (*loc, k), f"keys must be strings, not {toml_type(k)}", k)
                continue
            r = inner(v, (*loc, k), errors)
            bad = bad or r is _BAD
            out[k] = r
        return _BAD if bad else out
    return check


def _list_of(inner: _Check | None) -> _Check:
    def check(value: Any, loc: tuple[Any, ...], errors: list[dict[str, Any]]) -> Any:
        if not isinstance(value, list):
            return _err(errors, "type", loc, f"must be an array, not {toml_type(value)}", value)
        if inner is None:
            return list(value)
        out = [inner(v, (*loc, i), errors) for i, v in enumerate(value)]
        return _BAD if any(r is _BAD for r in out) else out
    return check


def _kept(value: Any, loc: tuple[Any, ...], errors: list[dict[str, Any]]) -> Any:
    return value


def _either(members: list[tuple[str, _Check]]) -> _Check:
    """The first member a value fits (``dict[str, Any] | str``), or one error naming every member's type."""
    wanted = " or ".join(name for name, _ in members)

    def check(value: Any, loc: tuple[Any, ...], errors: list[dict[str, Any]]) -> Any:
        for _, member in members:
            trial: list[dict[str, Any]] = []
            r = member(value, loc, trial)
            if r is not _BAD:
                return r
        return _err(errors, "type", loc, f"must be {wanted}, not {toml_type(value)}", value)
    return check


def _tagged(shapes: list[type[Shape]]) -> _Check:
    """A union of shapes told apart by ``kind`` (a shape whose ``kind`` has a default is the one for no ``kind``)."""
    by_kind: dict[str, type[Shape]] = {}
    for shape in shapes:
        field = shape.model_fields["kind"]
        for tag in typing.get_args(_hints(shape)["kind"]):
            by_kind[tag] = shape
        if not field.required:
            by_kind.setdefault("", shape)

    def check(value: Any, loc: tuple[Any, ...], errors: list[dict[str, Any]]) -> Any:
        if isinstance(value, tuple(shapes)):
            return value
        kind = value.get("kind", "") if isinstance(value, dict) else getattr(value, "kind", "")
        shape = by_kind.get(kind) if isinstance(kind, str) else None
        if shape is None:
            known = ", ".join(repr(k) for k in by_kind if k)
            return _err(errors, "union_tag_invalid", loc, f"unknown kind {kind!r} (one of: {known})", value)
        return shape._check(value, loc, errors)
    return check


def _json_value(value: Any, loc: tuple[Any, ...], errors: list[dict[str, Any]]) -> Any:
    """The check of ``Any`` (a free-form table: a node's ``input``, a request ``body``): every value is kept, a
    TOML date or time as its ISO 8601 string (:func:`jsonable`), so what is loaded is JSON wherever it is used
    first (a date in a node's input once failed the run inside, at its first journal write: adversarial review).
    """
    return jsonable(value)


def _compile(tp: Any) -> _Check | None:
    """The check of a type (for ``Any``: every value kept, dates as ISO strings)."""
    if tp is Any:
        return _json_value
    if tp in (str, int, float, bool):
        return _scalar(tp)
    if isinstance(tp, type) and issubclass(tp, Shape):
        return tp._check
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return _literal(args)
    if origin is dict:
        return _dict_of(_compile(args[1]))
    if origin is list:
        return _list_of(_compile(args[0]))
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if all(isinstance(a, type) and issubclass(a, Shape) for a in rest) and len(rest) > 1:
            inner: _Check | None = _tagged(rest)
        elif len(rest) == 1:
            inner = _compile(rest[0])
        else:
            inner = _either([(_NAMES.get(typing.get_origin(a) or a, str(a)), _compile(a) or _kept)
                             for a in rest])
        if len(rest) == len(args):
            return inner
        return _nullable(inner) if inner is not None else None
    raise TypeError(f"a config field of type {tp!r} is not supported")


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _bounded(field: _FieldInfo, inner: _Check | None) -> _Check | None:
    """``inner`` followed by the field's bounds, ``before`` and ``after`` hooks."""
    if (field.ge, field.gt, field.le, field.min_length, field.before, field.after) == (None,) * 6:
        return inner
    ge, gt, le, min_length, before, after = field.ge, field.gt, field.le, field.min_length, field.before, field.after

    def check(value: Any, loc: tuple[Any, ...], errors: list[dict[str, Any]]) -> Any:
        if before is not None:
            try:
                value = before(value)
            except ShapeError as exc:
                errors.extend({**e, "loc": (*loc, *e["loc"])} for e in exc.errors())
                return _BAD
            except ValueError as exc:
                return _err(errors, "value_error", loc, str(exc), value)
        written = value  # as the file has it (an integer stays one in a message)
        if inner is not None:
            value = inner(value, loc, errors)
            if value is _BAD:
                return _BAD
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if ge is not None and not value >= ge:
                return _err(errors, "bounds", loc, f"must be greater than or equal to {ge}, not {written}", value)
            if gt is not None and not value > gt:
                return _err(errors, "bounds", loc, f"must be greater than {gt}, not {written}", value)
            if le is not None and not value <= le:
                return _err(errors, "bounds", loc, f"must be less than or equal to {le}, not {written}", value)
        if min_length is not None and isinstance(value, (str, list)) and len(value) < min_length:
            if isinstance(value, str):
                unit = "character" if min_length == 1 else "characters"
                return _err(errors, "too_short", loc, f"must have at least {min_length} {unit}, not {len(value)}",
                            value)
            unit = "item" if min_length == 1 else "items"
            return _err(errors, "too_short", loc, f"must have at least {min_length} {unit}, not {len(value)}", value)
        if after is not None:
            try:
                value = after(value)
            except ValueError as exc:
                return _err(errors, "value_error", loc, str(exc), value)
        return value
    return check


class Shape:
    """Base of a config model: a frozen object whose fields are its class's annotations (see the module).

    Subclasses may define ``_before(cls, value)`` (a classmethod given the raw value, returning the value to
    check; ValueError is an error at the model's place) and ``_after(self)`` (run on a checked instance;
    ValueError likewise).
    """

    model_fields: dict[str, _FieldInfo] = {}
    _ready = False  # True once the fields' checks are built

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = {name: f for name, f in cls.model_fields.items()}
        for name, annotation in cls.__dict__.get("__annotations__", {}).items():
            if name.startswith("_") or "ClassVar" in str(annotation):
                continue
            value = cls.__dict__.get(name, _MISSING)
            field = value if isinstance(value, _FieldInfo) else _FieldInfo(value)
            field.name = name
            fields[name] = field  # a field a base has keeps its place, as in pydantic
            if name in cls.__dict__:
                delattr(cls, name)
        cls.model_fields = fields
        cls._ready = False

    @classmethod
    def _prepare(cls) -> None:
        """Resolve the annotations and build each field's check, once per class (at its first validation)."""
        hints = _hints(cls)
        fields = {}
        for name, field in cls.model_fields.items():
            copy = _FieldInfo.__new__(_FieldInfo)
            for slot in _FieldInfo.__slots__:
                setattr(copy, slot, getattr(field, slot))
            copy.annotation = hints[name]
            copy.check = _bounded(copy, _compile(copy.annotation))
            fields[name] = copy
        cls.model_fields = fields
        cls._ready = True

    @classmethod
    def _check(cls, value: Any, loc: tuple[Any, ...], errors: list[dict[str, Any]]) -> Any:
        if not cls._ready:
            cls._prepare()
        before = getattr(cls, "_before", None)
        if before is not None:
            try:
                value = before(value)
            except ShapeError as exc:  # errors placed under this table (a written form's own fields)
                errors.extend({**e, "loc": (*loc, *e["loc"])} for e in exc.errors())
                return _BAD
            except ValueError as exc:
                return _err(errors, "value_error", loc, str(exc), value)
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            return _err(errors, "type", loc, f"must be a table, not {toml_type(value)}", value)
        start = len(errors)
        values: dict[str, Any] = {}
        given: set[str] = set()
        keys = {name: field.key() if field.alias and field.alias in value else name
                for name, field in cls.model_fields.items()}
        used = {key for key in keys.values() if key in value}
        # a field written under its alias and its name too: the name is the unknown key
        unknown = [key for key in value if key not in used]
        hints = typo_hints(unknown, [f.key() for n, f in cls.model_fields.items() if keys[n] not in value]) \
            if unknown else {}
        for name, field in cls.model_fields.items():
            key = keys[name]
            if key in value:
                raw = value[key]
                values[name] = raw if field.check is None else field.check(raw, (*loc, key), errors)
                given.add(name)
            elif field.required:
                if field.key() not in hints.values():  # a required key an unknown one is a typo of: said at the typo
                    _err(errors, "missing", (*loc, field.key()), "is required", value)
            else:
                values[name] = field.make_default()
        for key in unknown:
            hint = f" (did you mean {hints[key]!r}?)" if key in hints else ""
            _err(errors, "extra_forbidden", (*loc, key), "unknown key" + hint, value[key])
        if len(errors) > start:
            return _BAD
        made = cls._made(values, given)
        after = getattr(made, "_after", None)
        if after is not None:
            try:
                after()
            except ValueError as exc:
                return _err(errors, "value_error", loc, str(exc), value)
        return made

    @classmethod
    def _made(cls, values: dict[str, Any], given: set[str]) -> Any:
        made = object.__new__(cls)
        made.__dict__.update(values)
        made.__dict__["_given"] = given
        return made

    @classmethod
    def model_validate(cls: type[_S], value: Any) -> _S:
        """``value`` (a table: a dict) checked into an instance; an instance of ``cls`` is returned as it is.

        Raises:
            ShapeError: every error found, each with its location.
        """
        errors: list[dict[str, Any]] = []
        made = cls._check(value, (), errors)
        if made is _BAD:
            raise ShapeError(errors)
        return made

    @classmethod
    def model_construct(cls: type[_S], **values: Any) -> _S:
        """An instance of trusted, already checked values (defaults for the fields not given); nothing is checked."""
        given = set(values)
        for name, field in cls.model_fields.items():
            if name not in values:
                values[name] = field.make_default()
        return cls._made(values, given)

    def __init__(self, **values: Any) -> None:
        """Check ``values`` (by field name or alias) into this instance. Raises: ShapeError."""
        made = type(self).model_validate(values)
        self.__dict__.update(made.__dict__)

    @property
    def model_fields_set(self) -> set[str]:
        """The names of the fields that were given (not defaulted)."""
        return set(self.__dict__.get("_given", ()))

    def model_copy(self: _S, *, update: dict[str, Any] | None = None) -> _S:
        """A copy with ``update``'s fields replaced (not checked)."""
        made = object.__new__(type(self))
        made.__dict__.update(self.__dict__)
        if update:
            made.__dict__.update(update)
            made.__dict__["_given"] = self.model_fields_set | set(update)
        return made

    def model_dump(self, *, mode: str = "python", include: set[str] | None = None,
                   by_alias: bool = False) -> dict[str, Any]:
        """The fields as plain data (nested models as dicts; dicts and lists copied). ``mode="json"``: TOML's
        dates and times (in free-form tables such as a node's ``input``) as ISO 8601 strings, ``Z`` for UTC, as
        pydantic wrote them. ``by_alias`` writes a field under its alias."""
        out: dict[str, Any] = {}
        for name, field in type(self).model_fields.items():
            if include is not None and name not in include:
                continue
            value = self.__dict__[name]
            out[field.key() if by_alias else name] = field.dump(value) if field.dump else \
                _dumped(value, by_alias, mode == "json")
        return out

    @classmethod
    def model_json_schema(cls, by_alias: bool = True) -> dict[str, Any]:
        """The JSON Schema (draft 2020-12) of a table of this model, nested models under ``$defs``."""
        defs: dict[str, Any] = {}
        schema = _model_schema(cls, defs)
        if defs:
            schema["$defs"] = defs
        return _sorted(schema)

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError(f"{type(self).__name__} is frozen: use model_copy(update=...)")

    def __delattr__(self, name: str) -> None:
        raise TypeError(f"{type(self).__name__} is frozen")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        names = type(self).model_fields
        return all(self.__dict__[n] == other.__dict__[n] for n in names)

    def __hash__(self) -> int:
        return hash((type(self), *(self.__dict__[n] for n in type(self).model_fields)))

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}={self.__dict__[n]!r}" for n in type(self).model_fields)
        return f"{type(self).__name__}({parts})"


def _dumped(value: Any, by_alias: bool, json: bool) -> Any:
    if isinstance(value, Shape):
        return value.model_dump(by_alias=by_alias, mode="json" if json else "python")
    if isinstance(value, dict):
        return {k: _dumped(v, by_alias, json) for k, v in value.items()}
    if isinstance(value, list):
        return [_dumped(v, by_alias, json) for v in value]
    return jsonable(value) if json else value


def jsonable(value: Any) -> Any:
    """``value`` with TOML's dates and times (at any depth of its tables and arrays) as ISO 8601 strings, ``Z``
    for UTC, as pydantic wrote them in JSON: what a run's inputs, a node's ``input`` and a request ``body``
    hold once loaded (the journal, an App's input and a request are JSON)."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, (datetime.date, datetime.time)):  # datetime.datetime is a date
        utc = isinstance(value, datetime.datetime) and value.utcoffset() == datetime.timedelta(0)
        return value.isoformat()[:-6] + "Z" if utc else value.isoformat()  # "+00:00" written "Z"
    return value


def _type_schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    if tp is Any:
        return {}
    simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if tp in simple:
        return {"type": simple[tp]}
    if isinstance(tp, type) and issubclass(tp, Shape):
        if tp.__name__ not in defs:
            defs[tp.__name__] = {}  # a place held against recursion
            defs[tp.__name__] = _model_schema(tp, defs)
        return {"$ref": f"#/$defs/{tp.__name__}"}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return {"const": args[0], "type": "string"} if len(args) == 1 else {"enum": list(args), "type": "string"}
    if origin is dict:
        inner = _type_schema(args[1], defs)
        return {"additionalProperties": inner or True, "type": "object"}
    if origin is list:
        return {"items": _type_schema(args[0], defs), "type": "array"}
    if origin in (Union, types.UnionType):
        return {"anyOf": [_type_schema(a, defs) if a is not type(None) else {"type": "null"} for a in args]}
    raise TypeError(f"no JSON Schema for {tp!r}")


def _sorted(value: Any, parent: str | None = None) -> Any:
    """Keys in sorted order at every level, except a ``properties`` table's (the fields' order) and a
    ``default``'s, as pydantic writes a schema (``workrun schema`` is the same text as before)."""
    if isinstance(value, dict):
        keys = value if parent in ("properties", "default") else sorted(value)
        return {k: _sorted(value[k], k) for k in keys}
    if isinstance(value, list):
        return [_sorted(v, parent) for v in value]
    return value


def _bounds(field: _FieldInfo, schema: dict[str, Any]) -> None:
    for attr, key in (("ge", "minimum"), ("gt", "exclusiveMinimum"), ("le", "maximum")):
        if getattr(field, attr) is not None:
            schema[key] = getattr(field, attr)
    if field.min_length is not None:
        schema["minItems" if schema.get("type") == "array" else "minLength"] = field.min_length


def _model_schema(cls: type[Shape], defs: dict[str, Any]) -> dict[str, Any]:
    hints = _hints(cls)
    props: dict[str, Any] = {}
    for name, field in cls.model_fields.items():
        schema = _type_schema(hints[name], defs)
        if "anyOf" in schema:
            non_null = [s for s in schema["anyOf"] if s != {"type": "null"}]
            for member in non_null:
                if "$ref" not in member:
                    _bounds(field, member)
        else:
            _bounds(field, schema)
        refs = "$ref" in schema or any("$ref" in s for s in schema.get("anyOf", []))
        if not refs:
            schema["title"] = field.key().replace("_", " ").title()
        if field.default is not _MISSING:
            schema["default"] = field.default
        props[field.key()] = schema
    import inspect  # only ``workrun schema`` needs it (it imports ast, dis, tokenize...)

    out: dict[str, Any] = {"additionalProperties": False}
    if cls.__doc__:
        out["description"] = inspect.cleandoc(cls.__doc__)
    out["properties"] = props
    required = [f.key() for f in cls.model_fields.values() if f.required]
    if required:
        out["required"] = required
    out["title"] = cls.__name__
    out["type"] = "object"
    return out
