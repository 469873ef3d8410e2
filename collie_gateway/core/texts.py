"""The texts of a wire value, defined once from the wire types themselves (X1).

Every string a wire struct holds is a text, at any depth: a field, an item of a list, a key
or a value of an argument's JSON. A string declared ``VERBATIM`` in ``wire/messages.py`` (an
id, the value of an open set, a link's URL) is not. :func:`masked` returns the value with
every text masked; it is what the event stream, every push, the webhook, a crew lead's copy
and the log lines send, so a field added to an ask tomorrow is masked without being named
here. :func:`texts` yields the same strings, for the tests that plant secrets in them.

The plan for each type is read once with ``msgspec.inspect`` and kept; :class:`MaskedAsks`
keeps each ask's masked copy, so every surface an ask goes to shares one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

import msgspec
import msgspec.inspect as mi

from wire.messages import VERBATIM, Ask

T = TypeVar("T")
Mask = Callable[[str], str]
# Rewrites one value with ``mask``; returns the value itself when nothing in it changed.
_Plan = Callable[[Any, Mask], Any]

_PLANS: dict[type, _Plan | None] = {}
_VERBATIM_KEY: Final = next(iter(VERBATIM))


def masked(value: T, mask: Mask) -> T:
    """``value`` (a wire struct, or a list or dict of them) with every text masked."""
    plan = _plan_of(type(value)) if isinstance(value, msgspec.Struct) else _json
    if plan is None:
        return value
    out: T = plan(value, mask)
    return out


class MaskedAsks:
    """Each ask masked once per version (X1), the copy shared by the phones' stream, a lead,
    the webhook and the notification. The newest ``size`` are kept; an ask met again with
    other content under the same id and version (another agent's) is masked anew."""

    def __init__(self, mask: Mask, size: int = 1024) -> None:
        self.mask = mask
        self.size = size
        self._kept: OrderedDict[tuple[str, str, int], tuple[Ask, Ask]] = OrderedDict()
        plan_ahead(Ask)  # at the gateway's start, not on the first ask's way (~2 ms)

    def __call__(self, ask: Ask) -> Ask:
        """``ask`` with every text masked."""
        key = (ask.conversation, ask.id, ask.version)
        kept = self._kept.get(key)
        if kept is not None and (kept[0] is ask or kept[0] == ask):
            return kept[1]
        shown = masked(ask, self.mask)
        self._kept[key] = (ask, shown)
        if len(self._kept) > self.size:
            self._kept.popitem(last=False)
        return shown

    def forget(self, ask: Ask) -> None:
        """The ask is resolved: its copy goes."""
        self._kept.pop((ask.conversation, ask.id, ask.version), None)

    @property
    def kept(self) -> int:
        """How many asks' copies are kept (not ``__len__``: an empty one is still given)."""
        return len(self._kept)


def texts(value: object) -> Iterator[str]:
    """Every text of ``value``, in field order (what :func:`masked` hands to the mask)."""
    seen: list[str] = []

    def keep(text: str) -> str:
        seen.append(text)
        return text

    masked(value, keep)
    yield from seen


def plan_ahead(cls: type) -> None:
    """Plan the struct ``cls`` and every struct it holds now, not when the first value of
    each is masked (reading the types costs milliseconds)."""
    seen: set[type] = set()

    def walk(t: mi.Type) -> None:
        if isinstance(t, mi.StructType) and t.cls not in seen:
            seen.add(t.cls)
            _plan_of(t.cls)
            for f in t.fields:
                walk(f.type)
        elif isinstance(t, mi.Metadata):
            walk(t.type)
        elif isinstance(t, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
            walk(t.item_type)
        elif isinstance(t, mi.DictType):
            walk(t.key_type)
            walk(t.value_type)
        elif isinstance(t, mi.UnionType):
            for each in t.types:
                walk(each)

    walk(mi.type_info(cls))


def _plan_of(cls: type) -> _Plan | None:
    if cls not in _PLANS:
        _PLANS[cls] = None  # a struct that holds itself: its texts are planned below
        _PLANS[cls] = _struct(mi.type_info(cls))
    return _PLANS[cls]


def _plan(t: mi.Type) -> _Plan | None:
    """How to mask a value of type ``t``; None when it holds no text."""
    if isinstance(t, mi.Metadata):
        if t.extra and t.extra.get(_VERBATIM_KEY):
            return None
        return _plan(t.type)
    if isinstance(t, mi.StrType):
        return _str
    if isinstance(t, mi.AnyType):
        return _json
    if isinstance(t, mi.StructType):
        return lambda value, mask: _struct_plan(t.cls)(value, mask)
    if isinstance(t, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
        return _sequence(_plan(t.item_type))
    if isinstance(t, mi.DictType):
        return _mapping(_plan(t.key_type), _plan(t.value_type))
    if isinstance(t, mi.UnionType):
        return _union(t.types)
    return None  # numbers, booleans, times, None: no text


def _struct_plan(cls: type) -> _Plan:
    return _plan_of(cls) or _unchanged


def _struct(info: mi.Type) -> _Plan | None:
    assert isinstance(info, mi.StructType)
    fields = [(f.name, plan) for f in info.fields if (plan := _plan(f.type)) is not None]
    if not fields:
        return None

    def run(value: Any, mask: Mask) -> Any:
        changes = {}
        for name, plan in fields:
            old = getattr(value, name)
            if old is not None and (new := plan(old, mask)) is not old:
                changes[name] = new
        return msgspec.structs.replace(value, **changes) if changes else value

    return run


def _sequence(item: _Plan | None) -> _Plan | None:
    if item is None:
        return None

    def run(value: Any, mask: Mask) -> Any:
        out = [item(x, mask) for x in value]
        if all(a is b for a, b in zip(out, value, strict=True)):
            return value
        return type(value)(out) if not isinstance(value, list) else out

    return run


def _mapping(key: _Plan | None, val: _Plan | None) -> _Plan | None:
    if key is None and val is None:
        return None

    def run(value: Any, mask: Mask) -> Any:
        return {
            (key(k, mask) if key else k): (val(v, mask) if val else v) for k, v in value.items()
        }

    return run


def _union(members: tuple[mi.Type, ...]) -> _Plan | None:
    """A union dispatches on the value's own type (msgspec allows one member per kind)."""
    by_kind: list[tuple[type | tuple[type, ...], _Plan]] = []
    for member in members:
        inner = member.type if isinstance(member, mi.Metadata) else member
        plan = _plan(member)
        if plan is None:
            continue
        if isinstance(inner, mi.StrType):
            by_kind.append((str, plan))
        elif isinstance(inner, mi.StructType):
            by_kind.append((inner.cls, plan))
        elif isinstance(inner, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
            by_kind.append(((list, tuple, set, frozenset), plan))
        elif isinstance(inner, mi.DictType):
            by_kind.append((dict, plan))
        else:
            by_kind.append((object, plan))
    if not by_kind:
        return None

    def run(value: Any, mask: Mask) -> Any:
        for kind, plan in by_kind:
            if isinstance(value, kind):
                return plan(value, mask)
        return value

    return run


def _str(value: Any, mask: Mask) -> Any:
    if not isinstance(value, str):
        return value
    out = mask(value)
    return value if out == value else out


def _json(value: Any, mask: Mask) -> Any:
    """Any JSON (an argument's value): every string in it, keys and values, masked."""
    if isinstance(value, str):
        return _str(value, mask)
    if isinstance(value, msgspec.Struct):
        return masked(value, mask)
    if isinstance(value, list | tuple):
        out = [_json(x, mask) for x in value]
        return value if all(a is b for a, b in zip(out, value, strict=True)) else out
    if isinstance(value, dict):
        pairs = [(_json(k, mask), _json(v, mask)) for k, v in value.items()]
        if all(a is k and b is v for (a, b), (k, v) in zip(pairs, value.items(), strict=True)):
            return value
        return _distinct(pairs)
    return value


def _distinct(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """The pairs as a dict; keys that masked alike are numbered (``"ghp_•••• (2)"``), so no
    value is lost."""
    out: dict[Any, Any] = {}
    for key, val in pairs:
        name, n = key, 1
        while name in out:
            n += 1
            name = f"{key} ({n})"
        out[name] = val
    return out


def _unchanged(value: Any, mask: Mask) -> Any:
    return value
