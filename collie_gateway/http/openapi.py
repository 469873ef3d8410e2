"""The phone API's OpenAPI 3.1 document, generated from the route table and the msgspec types.

Each route of ``routes.ROUTES`` is one operation: its summary and description are the
handler's docstring, its schemas are the msgspec types it answers with and takes, and every
property's description is the ``Attributes:`` entry of its type's docstring. Adding a route
means adding a :class:`Route` to that table (and documenting its types); nothing here changes.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

Handler = Callable[[Any], Awaitable[Any]]

ERROR_WORDS: Mapping[int, str] = {
    400: "Bad request: a query parameter or the JSON body is not of the documented shape",
    401: "No valid bearer token (when the gateway has one); the answer carries "
    "`WWW-Authenticate: Bearer`",
    404: "No durable agent of that name",
    413: "The body is over 1 MiB",
}

# Every path parameter of the API, described once (a route with another fails the tests).
PATH_PARAMETERS: Mapping[str, str] = {
    "agent": "The agent's name in sources.json (URL-encoded)",
    "conversation": "The conversation's id, as the agent gave it (URL-encoded)",
    "button": "The button's id, from the bar's control (URL-encoded)",
    "ask": "The ask's id, from the card's `ask_id` (URL-encoded)",
    "request_id": "The request id the phone sent with the tap",
    "device": "The device's id, from `POST /api/v1/devices`",
    "machine": "The crew member's name in the lead's sources.json (URL-encoded)",
    "tail": "The rest of a local route after /api/v1/: agents/… or answers/… (the member's "
    "own route)",
}


@dataclass(frozen=True, slots=True)
class Param:
    """A query or header parameter: its name, description and JSON Schema."""

    name: str
    description: str
    schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "string"})
    required: bool = False
    where: str = "query"


def flag_param(name: str, description: str) -> Param:
    """A boolean query parameter as ``routes.flag`` reads it."""
    return Param(
        name,
        description + " (`true`/`false`/`1`/`0`; anything else is 400)",
        {"type": "boolean", "default": False},
    )


@dataclass(frozen=True, slots=True)
class Route:
    """One route of the phone API: what serves it and what the document says of it.

    ``ok`` is the type of the 200 JSON answer (or a JSON Schema for an answer of no type of
    ours, or None with ``media`` other than JSON), ``ok_words`` its description (else the
    type's docstring); ``body`` the request body's type (a tuple: one of those); ``errors``
    the error answers beside the ones every route of its kind has (401, 404 under
    ``{agent}``, 400 with a body or a flag, 413); ``public`` routes need no token; ``events``
    documents a stream's event types. A path parameter may carry aiohttp's regex
    (``{tail:.+}``); the document shows ``{tail}``.
    """

    method: str
    path: str
    handler: Handler
    ok: type[Any] | Mapping[str, Any] | None
    body: type[Any] | tuple[type[Any], ...] | None = None
    ok_words: str = ""
    params: tuple[Param, ...] = ()
    errors: Mapping[int, str] = field(default_factory=dict)
    public: bool = False
    media: str = "application/json"
    events: Mapping[str, type[Any]] = field(default_factory=dict)


_ATTRIBUTES = re.compile(r"^Attributes:\s*$", re.M)
_ENTRY = re.compile(r"^    (\w+): ?(.*)$")


def field_docs(kind: type[Any]) -> tuple[str, dict[str, str]]:
    """A type's docstring without its ``Attributes:`` section, and that section's entries
    (``name: words``, continued on lines indented further), for it and its bases."""
    entries: dict[str, str] = {}
    for base in reversed(kind.__mro__):
        text = inspect.cleandoc(base.__dict__.get("__doc__") or "")
        match = _ATTRIBUTES.search(text)
        if match is None:
            continue
        name = None
        for line in text[match.end() :].splitlines():
            entry = _ENTRY.match(line)
            if entry:
                name = entry.group(1)
                entries[name] = entry.group(2).strip()
            elif name and line.startswith("        "):
                entries[name] += " " + line.strip()
            elif line.strip():
                break
    text = inspect.cleandoc(kind.__doc__ or "")
    match = _ATTRIBUTES.search(text)
    summary = text[: match.start()].strip() if match else text
    return summary, entries


def _structs(types: Iterable[Any]) -> dict[str, type[Any]]:
    """Every Struct reachable from ``types``, by class name."""
    found: dict[str, type[Any]] = {}

    def walk(info: msgspec.inspect.Type) -> None:
        if isinstance(info, msgspec.inspect.StructType):
            if info.cls.__name__ in found:
                return
            found[info.cls.__name__] = info.cls
            for f in info.fields:
                walk(f.type)
        elif isinstance(info, msgspec.inspect.UnionType):
            for sub in info.types:
                walk(sub)
        elif isinstance(info, msgspec.inspect.Metadata):
            walk(info.type)
        elif isinstance(info, msgspec.inspect.ListType | msgspec.inspect.DictType):
            walk(info.value_type if isinstance(info, msgspec.inspect.DictType) else info.item_type)

    for info in msgspec.inspect.multi_type_info(list(types)):
        walk(info)
    return found


def _subclasses(kind: type[Any]) -> list[type[Any]]:
    return [s for sub in kind.__subclasses__() for s in (sub, *_subclasses(sub))]


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: Mapping[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _operation(route: Route) -> dict[str, Any]:
    summary, _, rest = inspect.cleandoc(route.handler.__doc__ or "").partition("\n")
    op: dict[str, Any] = {"operationId": route.handler.__name__, "summary": summary.strip()}
    description = inspect.cleandoc(rest)
    if route.events:
        lines = [
            f"- `{name}` ({kind.__name__}): {field_docs(kind)[0]}"
            for name, kind in route.events.items()
        ]
        description += "\n\nEvent types (`x-events` gives each one's data schema):\n\n"
        description += "\n".join(lines)
        op["x-events"] = {name: _ref(kind.__name__) for name, kind in route.events.items()}
    if description:
        op["description"] = description
    if route.public:
        op["security"] = []
    names = re.findall(r"\{(\w+)(?::[^{}]+)?\}", route.path)
    params = [
        {
            "name": n,
            "in": "path",
            "required": True,
            "schema": {"type": "string"},
            "description": PATH_PARAMETERS[n],
        }
        for n in names
    ]
    params += [
        {
            "name": p.name,
            "in": p.where,
            "required": p.required,
            "schema": dict(p.schema),
            "description": p.description,
        }
        for p in route.params
    ]
    if params:
        op["parameters"] = params
    codes: dict[int, str] = {}
    if not route.public:
        codes[401] = ERROR_WORDS[401]
    if route.body is not None or any(p.schema.get("type") == "boolean" for p in route.params):
        codes[400] = ERROR_WORDS[400]
    if "agent" in names:
        codes[404] = ERROR_WORDS[404]
    if route.body is not None:
        codes[413] = ERROR_WORDS[413]
        kinds = route.body if isinstance(route.body, tuple) else (route.body,)
        schema = (
            _ref(kinds[0].__name__)
            if len(kinds) == 1
            else {"oneOf": [_ref(k.__name__) for k in kinds]}
        )
        op["requestBody"] = {
            "required": True,
            "description": " Or: ".join(field_docs(k)[0] for k in kinds),
            "content": {"application/json": {"schema": schema}},
        }
    codes.update(route.errors)
    if route.ok is None:
        ok = {
            "description": route.ok_words or route.media,
            "content": {route.media: {"schema": {"type": "string"}}},
        }
    elif isinstance(route.ok, type):
        ok = _json(_ref(route.ok.__name__), route.ok_words or field_docs(route.ok)[0])
    else:
        ok = _json(dict(route.ok), route.ok_words)
    op["responses"] = {
        "200": ok,
        **{str(c): _json(_ref("Error"), codes[c]) for c in sorted(codes)},
    }
    return op


def openapi_document(routes: Iterable[Route], error: type[Any]) -> dict[str, Any]:
    """The whole document for ``routes``; ``error`` is the type of every error answer."""
    routes = list(routes)
    paths: dict[str, dict[str, Any]] = {}
    types: list[Any] = [error]
    for route in routes:
        path = re.sub(r"\{(\w+):[^{}]+\}", r"{\1}", route.path)
        paths.setdefault(path, {})[route.method.lower()] = _operation(route)
        if isinstance(route.ok, type):
            types.append(route.ok)
        if route.body is not None:
            types += route.body if isinstance(route.body, tuple) else [route.body]
        types += route.events.values()
    structs = _structs(types)
    # A tagged union's base (a card's Body) stands for its kinds: add them all.
    for kind in list(structs.values()):
        for sub in _subclasses(kind):
            structs.update(_structs([sub]))
    _, components = msgspec.json.schema_components(
        list(structs.values()), ref_template="#/components/schemas/{name}"
    )
    for name, schema in components.items():
        struct = structs.get(name)
        if struct is None:
            continue
        summary, entries = field_docs(struct)
        if summary:
            schema["description"] = summary
        for prop, sub in schema.get("properties", {}).items():
            if prop in entries:
                sub["description"] = entries[prop]
        tagged = _subclasses(struct)
        if tagged:
            # The phone gets one of the kinds, told apart by their ``kind`` tag.
            tags = {str(msgspec.inspect.type_info(s).tag): s.__name__ for s in tagged}  # type: ignore[attr-defined]
            components[name] = {
                "title": name,
                "description": summary,
                "oneOf": [_ref(n) for n in tags.values()],
                "discriminator": {
                    "propertyName": "kind",
                    "mapping": {t: _ref(n)["$ref"] for t, n in tags.items()},
                },
            }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Collie gateway phone API",
            "version": "1",
            "description": API_DESCRIPTION,
        },
        "paths": paths,
        "components": {
            "schemas": dict(sorted(components.items())),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        # A gateway on loopback may run without a token; then no header is needed.
        "security": [{}, {"bearer": []}],
    }


API_DESCRIPTION = """\
The phone's side of Collie gateway: screens built for the phone (dashboard, conversation
list, chat with ask cards) and the commands a tap sends.

**Times** are RFC 3339 strings in UTC everywhere (`2026-12-03T10:00:00Z`).

**Staying current without a gap.** Every screen (`ConversationList`, `Chat`) carries
`event_id`: the id of the newest live-stream event the screen already includes. Open
`GET /api/v1/events` with `Last-Event-ID: <event_id>` and the stream replays exactly the events
after it: nothing is missed between the read and the stream, and nothing is applied twice.
When the gateway cannot replay from that id (it restarted, or the id is too old) the stream
starts with `reset`: read the screens again.

**Retries.** Every command carries a `request_id` the phone makes once per tap; sending the
same request again (after a timeout, a lost connection or a restart of either side) reaches the
agent at most once and answers with the first outcome.

**null.** A field that is null means "nothing to show", never "unknown": a count is null when
the spec hides it (a waiting count of zero, D5; the open asks of a row that waits for nothing,
L3), so the phone draws no number rather than a 0.
"""
