"""Reading an HTTP body whole, within a limit (for the gateway's links and the bridges' own
clients): a body is held in memory, so one over its limit is refused before it is read on."""

from __future__ import annotations

import aiohttp

from wire.errors import BodyTooLarge


async def read_limited(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """Read a body, refusing one over ``limit`` bytes before reading it all.

    (``resp.content.read(n)`` is no such thing: it returns what has arrived, up to ``n``.)

    Raises:
        BodyTooLarge: the declared or actual length is over ``limit``.
    """
    if resp.content_length is not None and resp.content_length > limit:
        raise BodyTooLarge(f"body of {resp.content_length} bytes is over the limit of {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(65536):
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"body over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
