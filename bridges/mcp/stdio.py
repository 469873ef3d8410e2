"""``bridge mcp --stdio``: for a host that only launches commands, a process that carries MCP
between its stdio and the long-lived bridge's Streamable HTTP endpoint, message by message.

It keeps no asks of its own: the bridge holds them, in the session this process opened. When
the host closes stdin (or the process ends) the session ends with it (``DELETE``; a killed
process: the bridge's idle timeout). It sends its working folder (``X-Collie-Cwd``) so the
conversation is titled with it.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import anyio
import httpx2
from mcp.client.streamable_http import streamable_http_client
from mcp.server.stdio import stdio_server
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage

from bridges.mcp.bridge import CWD_HEADER


async def _pump(
    source: ReadStream[SessionMessage | Exception], sink: WriteStream[SessionMessage]
) -> None:
    async for message in source:
        if isinstance(message, SessionMessage):
            await sink.send(message)


async def relay(url: str, cwd: Path) -> None:
    """Carry MCP between this process's stdio and ``url`` until stdin ends."""
    headers = {CWD_HEADER: quote(str(cwd))}
    timeout = httpx2.Timeout(30.0, read=None)  # a wait for the person has no read limit
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as client,
        streamable_http_client(url, http_client=client) as (up_read, up_write),
        stdio_server() as (down_read, down_write),
        anyio.create_task_group() as group,
    ):
        group.start_soon(_pump, up_read, down_write)
        await _pump(down_read, up_write)
        group.cancel_scope.cancel()
        # Each transport's writer runs until its stream is closed.
        await up_write.aclose()
        await down_write.aclose()
