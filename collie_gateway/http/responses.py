"""The phone API's JSON answers: bodies encoded with msgspec, and the one error shape
``{"error": code, "message": sentence}``."""

from __future__ import annotations

import msgspec
from aiohttp import web

_encoder = msgspec.json.Encoder()


def encoded(payload: object, status: int = 200) -> web.Response:
    """A JSON answer encoded with msgspec."""
    return web.Response(
        body=_encoder.encode(payload), status=status, content_type="application/json"
    )


def json_body(body: bytes) -> web.Response:
    """An answer of JSON already encoded."""
    return web.Response(body=body, content_type="application/json")


def error_body(code: str, message: str) -> str:
    """The error body's text."""
    return _encoder.encode({"error": code, "message": message}).decode()


def json_error(status: int, code: str, message: str) -> web.Response:
    """An error answer to return."""
    return web.Response(
        text=error_body(code, message), status=status, content_type="application/json"
    )


def http_error(kind: type[web.HTTPError], code: str, message: str) -> web.HTTPError:
    """An error to raise, with the same body."""
    return kind(text=error_body(code, message), content_type="application/json")
