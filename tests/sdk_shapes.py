"""Hypothesis strategies for the JSON the official SDKs' request types allow, built by walking
their TypedDict annotations (``get_type_hints``): each TypedDict its required keys and
any of its optional ones, each Literal one of its values, each Iterable a short list.

``st.from_type`` on these TypedDicts makes iterables that are no JSON (``dict_values``,
``ChainMap``); the walk keeps to what a client sends. Types with no JSON form (file handles,
the SDKs' pydantic response models that may stand for a block) are left out of their unions.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any

import typing_extensions
from hypothesis import strategies as st

__all__ = ["json_of"]

_TEXT = st.text(max_size=8)
_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-1000, 1000), _TEXT)
_JSON = st.recursive(
    _LEAF,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(_TEXT, inner, max_size=2),
    max_leaves=4,
)
_LISTS = (
    collections.abc.Iterable,
    collections.abc.Sequence,
    collections.abc.Collection,
    list,
    tuple,
)
_MAPS = (collections.abc.Mapping, dict)
_MARKS = (
    typing.Required,
    typing.NotRequired,
    typing_extensions.Required,
    typing_extensions.NotRequired,
)
_MADE: dict[Any, st.SearchStrategy[Any]] = {}


def json_of(tp: Any) -> st.SearchStrategy[Any]:
    """JSON values of the annotated type ``tp``; raises TypeError when it has no JSON form."""
    made = _walk(tp, 0)
    if made is None:
        raise TypeError(f"{tp!r} has no JSON form")
    return made


def _walk(tp: Any, depth: int) -> st.SearchStrategy[Any] | None:
    if typing_extensions.is_typeddict(tp):
        return _typed_dict(tp, depth)
    origin, args = typing_extensions.get_origin(tp), typing_extensions.get_args(tp)
    if origin in (typing.Annotated, typing_extensions.Annotated):
        return _walk(args[0], depth)
    if origin in _MARKS:
        return _walk(args[0], depth)
    if origin in (typing.Literal, typing_extensions.Literal):
        return st.sampled_from(args)
    if origin in (typing.Union, types.UnionType):
        options = [s for s in (_walk(a, depth) for a in args) if s is not None]
        return st.one_of(options) if options else None
    if origin in _LISTS:
        item = _walk(args[0], depth + 1) if args else _JSON
        return None if item is None else st.lists(item, max_size=2 if depth < 3 else 0)
    if origin in _MAPS or tp is dict:
        return st.dictionaries(_TEXT, _JSON, max_size=2)
    return _plain(tp)


def _plain(tp: Any) -> st.SearchStrategy[Any] | None:
    if tp is type(None) or tp is None:
        return st.none()
    if tp is str:
        return _TEXT
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(0, 1000)
    if tp is float:
        return st.floats(0, 2, allow_nan=False)
    if tp in (object, Any):
        return _JSON
    return None  # a file handle, a path, a pydantic model: no JSON a client writes


def _typed_dict(tp: Any, depth: int) -> st.SearchStrategy[Any] | None:
    key = (tp, min(depth, 3))
    if key in _MADE:
        return _MADE[key]
    _MADE[key] = st.deferred(lambda: _MADE[key])  # a recursive type refers to itself
    hints = typing_extensions.get_type_hints(tp, include_extras=True)
    required, optional = {}, {}
    for name, hint in hints.items():
        made = _walk(hint, depth + 1)
        wire = _alias(hint) or name
        if _required(hint, tp.__total__):
            if made is None:
                _MADE[key] = st.nothing()
                return None
            required[wire] = made
        elif made is not None:
            optional[wire] = made
    _MADE[key] = st.fixed_dictionaries(required, optional=optional)
    return _MADE[key]


def _required(hint: Any, total: bool) -> bool:
    """Whether a TypedDict's field must be given: read from its annotation, since
    ``__required_keys__`` misses ``Required[...]`` written as a string annotation (the SDKs'
    modules use ``from __future__ import annotations``)."""
    origin = typing_extensions.get_origin(hint)
    if origin in (typing.Required, typing_extensions.Required):
        return True
    if origin in (typing.NotRequired, typing_extensions.NotRequired):
        return False
    return total


def _alias(hint: Any) -> str | None:
    """The name on the wire an SDK gives a field through ``Annotated[..., PropertyInfo]``."""
    while typing_extensions.get_origin(hint) in _MARKS:
        hint = typing_extensions.get_args(hint)[0]
    if typing_extensions.get_origin(hint) in (typing.Annotated, typing_extensions.Annotated):
        for meta in hint.__metadata__:
            alias = getattr(meta, "alias", None)
            if isinstance(alias, str):
                return alias
    return None
