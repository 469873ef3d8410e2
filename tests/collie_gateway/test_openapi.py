"""The OpenAPI document: every route documented, structurally valid, served as built."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web
from openapi_spec_validator import validate
from pytest_aiohttp import AiohttpClient

import collie_gateway
from collie_gateway.http.routes import document as openapi_document
from collie_gateway.http.webpage import is_web_path
from collie_gateway.serving import gateway_app
from collie_gateway.settings import Settings

METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})
PATH_ITEM_KEYS = METHODS | {"summary", "description", "servers", "parameters", "$ref"}
STATUS = re.compile(r"^([1-5][0-9][0-9]|[1-5]XX|default)$")
COMPONENT_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
TEMPLATE = re.compile(r"\{([^{}]+)\}")
EVENT_TYPES = (
    "dashboard.row",
    "list.changed",
    "list.reset",
    "list.row",
    "list.removed",
    "chat.item",
    "chat.delta",
    "chat.note",
    "chat.reload",
    "chat.changed",
    "answer.settled",
    "push.logged",
    "ask.raised",
    "ask.resolved",
    "crew.section",
    "stream",
    "reset",
)


def _app(tmp_path: Path, token: str | None = None) -> web.Application:
    return gateway_app(Settings(sources=[], db_path=tmp_path / "g.db", token=token))


def _operations(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(METHOD, path) → operation."""
    return {
        (method.upper(), path): op
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if method in METHODS
    }


def _resolve(doc: dict[str, Any], ref: str) -> Any:
    """The target of a local ``$ref``.

    Raises:
        KeyError: it does not resolve.
    """
    assert ref.startswith("#/"), ref
    node: Any = doc
    for part in ref[2:].split("/"):
        key = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or key not in node:
            raise KeyError(ref)
        node = node[key]
    return node


def _refs(node: Any) -> list[str]:
    """Every ``$ref`` under ``node``."""
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in _refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in _refs(value)]
    return []


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "object": (dict,),
    "array": (list,),
}


def _problems(doc: dict[str, Any], schema: dict[str, Any], value: Any, at: str = "$") -> list[str]:
    """Where ``value`` breaks ``schema`` (the subset of JSON Schema the document uses)."""
    if "$ref" in schema:
        return _problems(doc, _resolve(doc, schema["$ref"]), value, at)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            fits = sum(not _problems(doc, s, value, at) for s in schema[key])
            if fits == 0 or (key == "oneOf" and fits > 1):
                return [f"{at}: {fits} of {key} fit"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{at}: {value!r} not in {schema['enum']}"]
    kinds = schema.get("type")
    if kinds is not None:
        names = [kinds] if isinstance(kinds, str) else kinds
        ok = any(isinstance(value, _JSON_TYPES[n]) for n in names)
        if not ok or (isinstance(value, bool) and "boolean" not in names):
            return [f"{at}: {value!r} is not {kinds}"]
    problems: list[str] = []
    if isinstance(value, dict):
        props = schema.get("properties", {})
        problems += [f"{at}: no {k!r}" for k in schema.get("required", []) if k not in value]
        if schema.get("additionalProperties") is False:
            problems += [f"{at}: extra {k!r}" for k in value if k not in props]
        for key, sub in value.items():
            if key in props:
                problems += _problems(doc, props[key], sub, f"{at}.{key}")
    if isinstance(value, list) and "items" in schema:
        for index, sub in enumerate(value):
            problems += _problems(doc, schema["items"], sub, f"{at}[{index}]")
    return problems


# --- (1) every route is documented, every operation is a route ------------------------------


def test_every_route_is_documented_and_every_operation_is_a_route(tmp_path: Path) -> None:
    app = _app(tmp_path)
    routes = {
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.method != "HEAD"
        and route.resource is not None
        and not is_web_path(route.resource.canonical)  # the web companion's files
    }
    documented = set(_operations(openapi_document()))
    assert routes - documented == set(), "routes missing from openapi.py"
    assert documented - routes == set(), "documented operations that are no route"


# --- (2) structurally valid OpenAPI 3.1 -----------------------------------------------------


def test_document_is_structurally_valid_openapi_3_1() -> None:
    doc = openapi_document()
    assert re.fullmatch(r"3\.1\.\d+", doc["openapi"])
    assert isinstance(doc["info"]["title"], str)
    assert isinstance(doc["info"]["version"], str)
    assert msgspec.json.decode(msgspec.json.encode(doc)) == doc, "not plain JSON"
    schemes = doc["components"]["securitySchemes"]
    assert schemes["bearer"] == {"type": "http", "scheme": "bearer"}
    for name, schema in doc["components"]["schemas"].items():
        assert COMPONENT_NAME.fullmatch(name), name
        assert isinstance(schema, dict), name
    for ref in _refs(doc):
        _resolve(doc, ref)
    ids: list[str] = []
    for path, item in doc["paths"].items():
        assert path.startswith("/"), path
        extra = {k for k in item if k not in PATH_ITEM_KEYS and not k.startswith("x-")}
        assert not extra, (path, extra)
        for method, op in item.items():
            if method in METHODS:
                ids.append(op["operationId"])
                _check_operation(doc, path, method, op)
    assert len(ids) == len(set(ids)), "operationIds must be unique"


def _check_operation(doc: dict[str, Any], path: str, method: str, op: dict[str, Any]) -> None:
    where = f"{method.upper()} {path}"
    assert op["responses"], where
    for status, response in op["responses"].items():
        assert STATUS.fullmatch(status), (where, status)
        assert isinstance(response["description"], str), (where, status)
        for media in response.get("content", {}).values():
            assert isinstance(media["schema"], dict), (where, status)
    params = op.get("parameters", [])
    seen = {(p["name"], p["in"]) for p in params}
    assert len(seen) == len(params), f"{where}: a parameter twice"
    for param in params:
        assert param["in"] in ("query", "header", "path", "cookie"), where
        assert ("schema" in param) != ("content" in param), where
        if param["in"] == "path":
            assert param["required"] is True, (where, param["name"])
    declared = {p["name"] for p in params if p["in"] == "path"}
    assert declared == set(TEMPLATE.findall(path)), where
    if "requestBody" in op:
        assert op["requestBody"]["content"], where
    for requirement in op.get("security", doc["security"]):
        assert set(requirement) <= set(doc["components"]["securitySchemes"]), where


def test_bodies_and_errors_are_described() -> None:
    ops = _operations(openapi_document())
    for (method, path), op in ops.items():
        if method == "POST":
            assert "400" in op["responses"], path
            assert op["requestBody"]["required"] is True, path
        if op.get("security") != []:  # public: /healthz, and POST /api/v1/pair (issue 21)
            assert "401" in op["responses"], path
        if "{agent}" in path:
            assert "404" in op["responses"], path
    chat = ops["GET", "/api/v1/agents/{agent}/conversations/{conversation}"]
    assert {"200", "400", "401", "404", "502", "504"} <= set(chat["responses"])
    assert ops["GET", "/healthz"]["security"] == []
    assert ops["POST", "/api/v1/pair"]["security"] == []


def test_every_event_type_is_described() -> None:
    op = _operations(openapi_document())["GET", "/api/v1/events"]
    assert "text/event-stream" in op["responses"]["200"]["content"]
    for event in EVENT_TYPES:
        assert f"`{event}`" in op["description"], event
    assert set(op["x-events"]) == set(EVENT_TYPES)


def test_every_published_event_type_is_documented() -> None:
    """Scan the gateway for ``.publish("type", …)`` and ``PhoneEvent(id, "type", …)``."""
    published: set[str] = set()
    for source in Path(collie_gateway.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            index = {"publish": 0, "PhoneEvent": 1}.get(name)
            if index is None or len(node.args) <= index:
                continue
            arg = node.args[index]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                published.add(arg.value)
    assert published, "found no publish calls"
    assert published <= set(EVENT_TYPES)
    x_events = _operations(openapi_document())["GET", "/api/v1/events"]["x-events"]
    assert published <= set(x_events)


# --- (3) served over HTTP, and the answers fit it -------------------------------------------


async def test_openapi_json_is_served(tmp_path: Path, aiohttp_client: AiohttpClient) -> None:
    client = await aiohttp_client(_app(tmp_path))
    resp = await client.get("/openapi.json")
    assert resp.status == 200
    assert resp.content_type == "application/json"
    assert await resp.json() == openapi_document()


@pytest.mark.parametrize(
    ("method", "url", "path", "status"),
    [
        ("GET", "/healthz", "/healthz", 200),
        ("GET", "/api/v1/dashboard", "/api/v1/dashboard", 200),
        ("GET", "/api/v1/dashboard?pending_only=maybe", "/api/v1/dashboard", 400),
        ("GET", "/api/v1/agents/nope", "/api/v1/agents/{agent}", 404),
        (
            "GET",
            "/api/v1/agents/nope/conversations",
            "/api/v1/agents/{agent}/conversations",
            404,
        ),
        ("POST", "/api/v1/agents/nope/conversations", "/api/v1/agents/{agent}/conversations", 404),
        (
            "GET",
            "/api/v1/agents/nope/closed?cursor=x",
            "/api/v1/agents/{agent}/closed",
            404,
        ),
        ("GET", "/api/v1/agents/nope/new", "/api/v1/agents/{agent}/new", 404),
        ("GET", "/api/v1/answers/nope", "/api/v1/answers/{request_id}", 404),
    ],
)
async def test_answers_fit_the_document(
    tmp_path: Path,
    aiohttp_client: AiohttpClient,
    method: str,
    url: str,
    path: str,
    status: int,
) -> None:
    doc = openapi_document()
    client = await aiohttp_client(_app(tmp_path))
    resp = await client.request(method, url, json={} if method == "POST" else None)
    assert resp.status == status
    response = _operations(doc)[method, path]["responses"][str(status)]
    schema = response["content"]["application/json"]["schema"]
    assert _problems(doc, schema, await resp.json()) == []


async def test_token_errors_fit_the_document(tmp_path: Path, aiohttp_client: AiohttpClient) -> None:
    doc = openapi_document()
    client = await aiohttp_client(_app(tmp_path, token="secret"))
    assert (await client.get("/healthz")).status == 200
    refused = await client.get("/openapi.json")
    assert refused.status == 401
    schema = _operations(doc)["GET", "/openapi.json"]["responses"]["401"]["content"]
    assert _problems(doc, schema["application/json"]["schema"], await refused.json()) == []
    served = await client.get("/openapi.json", headers={"Authorization": "Bearer secret"})
    assert await served.json() == doc


def test_problems_catches_a_wrong_answer() -> None:
    doc = openapi_document()
    error = {"$ref": "#/components/schemas/Error"}
    assert _problems(doc, error, {"error": "x", "message": "y"}) == []
    assert _problems(doc, error, {"error": "x"}) == ["$: no 'message'"]
    assert _problems(doc, error, {"error": 1, "message": "y"}) != []
    dashboard = {"$ref": "#/components/schemas/Dashboard"}
    bad = {"sections": [], "durable_agents_position": "left", "pending_only": False}
    assert _problems(doc, dashboard, bad) != []


# --- (4) described field by field, one time format --------------------------------------------


def test_every_property_parameter_and_body_is_described() -> None:
    doc = openapi_document()
    missing = [
        f"{name}.{prop}"
        for name, schema in doc["components"]["schemas"].items()
        for prop, sub in schema.get("properties", {}).items()
        if not sub.get("description")
    ]
    assert missing == []
    for (method, path), op in _operations(doc).items():
        assert op["summary"], (method, path)
        for param in op.get("parameters", []):
            assert param["description"], (method, path, param["name"])
        if "requestBody" in op:
            assert op["requestBody"]["description"], (method, path)
        for status, response in op["responses"].items():
            assert response["description"], (method, path, status)


def test_what_a_client_must_know_is_explained() -> None:
    doc = openapi_document()
    schemas = doc["components"]["schemas"]
    for screen in ("Chat", "ConversationList"):
        assert "Last-Event-ID" in schemas[screen]["properties"]["event_id"]["description"]
    position = schemas["Dashboard"]["properties"]["durable_agents_position"]["description"]
    assert "above" in position
    assert "null when" in position
    assert "not 0" in schemas["ListRow"]["properties"]["open_asks"]["description"]
    assert "not 0" in schemas["RightEdge"]["properties"]["waiting"]["description"]
    assert "RFC 3339" in doc["info"]["description"]


def _time_properties(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        f"{name}.{prop}": sub
        for name, schema in doc["components"]["schemas"].items()
        for prop, sub in schema.get("properties", {}).items()
        if prop in ("at", "deadline") or prop.endswith("_at")
    }


def test_every_time_is_an_rfc3339_string() -> None:
    times = _time_properties(openapi_document())
    assert {"DeviceRow.registered_at", "PushRow.at", "ListRow.updated_at"} <= set(times)
    for where, sub in times.items():
        kinds = [(k.get("type"), k.get("format")) for k in sub.get("anyOf", [sub])]
        assert ("string", "date-time") in kinds, where


def test_a_route_of_another_module_needs_only_its_entry() -> None:
    """The generator alone: a regex path parameter, a body of several kinds, an answer with
    a schema of its own (as a crew member's relayed view)."""
    from collie_gateway.http.api import Error
    from collie_gateway.http.openapi import Route, openapi_document
    from collie_gateway.http.routes import PhonePlain, PhoneTurn

    async def relay(request: object) -> object:
        """Relay a command to a member.

        The member answers as a local agent would.
        """
        return request

    route = Route(
        "POST",
        "/api/v1/machines/{device}/{request_id:.+}",
        relay,
        {"type": "object"},
        body=(PhoneTurn, PhonePlain),
        ok_words="The member's answer",
    )
    doc = openapi_document([route], Error)
    validate(doc)
    op = doc["paths"]["/api/v1/machines/{device}/{request_id}"]["post"]
    assert (op["operationId"], op["summary"]) == ("relay", "Relay a command to a member.")
    assert op["description"] == "The member answers as a local agent would."
    assert [p["name"] for p in op["parameters"]] == ["device", "request_id"]
    body = op["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"oneOf": [_ref_of("PhoneTurn"), _ref_of("PhonePlain")]}
    assert op["responses"]["200"]["content"]["application/json"]["schema"] == {"type": "object"}
    assert {"400", "401", "413"} <= set(op["responses"])
    assert {"PhoneTurn", "PhonePlain", "Error"} <= set(doc["components"]["schemas"])


def _ref_of(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}
