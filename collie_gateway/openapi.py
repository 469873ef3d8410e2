"""The phone API's OpenAPI 3.1 document; response schemas come from the view types."""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec

from collie_gateway.views.dashboard import Dashboard

_ERROR = {"$ref": "#/components/schemas/Error"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    words = {400: "Bad request", 401: "No valid bearer token", 404: "Not found"}
    return {str(c): _json(_ERROR, words[c]) for c in codes}


def _get(summary: str, ok: dict[str, Any], *errors: int, params: list[Any] | None = None) -> Any:
    op: dict[str, Any] = {"summary": summary, "responses": {"200": ok, **_errors(*errors)}}
    if params:
        op["parameters"] = params
    return {"get": op}


_AGENT = {"name": "agent", "in": "path", "required": True, "schema": {"type": "string"}}


@cache
def openapi_document() -> dict[str, Any]:
    """The whole document (built once)."""
    (dash_ref,), components = msgspec.json.schema_components(
        [Dashboard], ref_template="#/components/schemas/{name}"
    )
    components["Error"] = {
        "type": "object",
        "required": ["error", "message"],
        "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
    }
    components["AgentHome"] = {
        "type": "object",
        "required": ["agent", "state", "features", "warning", "conversations"],
        "properties": {
            "agent": {"type": "string"},
            "state": {
                "type": "string",
                "enum": ["starting", "ready", "unreachable", "version_mismatch"],
            },
            "reason": {"type": ["string", "null"]},
            "runtime": {"type": ["string", "null"]},
            "features": {"type": "array", "items": {"type": "string"}},
            "warning": {"type": ["string", "null"], "description": "spec R5's box"},
            "conversations": {"type": "string"},
        },
    }
    paths: dict[str, Any] = {
        "/healthz": _get(
            "Liveness",
            _json({"type": "object"}, "The gateway answers"),
        ),
        "/openapi.json": _get("This document", _json({"type": "object"}, "OpenAPI 3.1")),
        "/api/v1/dashboard": _get(
            "The dashboard (spec D1–D10)",
            _json(dash_ref, "Sections in drawing order"),
            400,
            401,
            params=[
                {
                    "name": "pending_only",
                    "in": "query",
                    "schema": {"type": "boolean"},
                    "description": "Show only panes with pending requests (D9)",
                }
            ],
        ),
        "/api/v1/events": _get(
            "The phone's live stream",
            {
                "description": "Server-sent events; resume with Last-Event-ID",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            },
            401,
            params=[
                {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}},
                {"name": "last_event_id", "in": "query", "schema": {"type": "string"}},
            ],
        ),
        "/api/v1/agents/{agent}": _get(
            "An agent's home header (R5's warning box)",
            _json({"$ref": "#/components/schemas/AgentHome"}, "The agent"),
            401,
            404,
            params=[_AGENT],
        ),
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "Collie gateway phone API", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"bearer": []}],
    }
