"""One run of the ACP agent's process: its stdio as a JSON-RPC peer (the I/O shell around
``bridges.acp.jsonrpc``). A process is one epoch: requests, answers and ids never cross from one
process to another."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

import msgspec

from bridges.acp.jsonrpc import (
    INVALID_REQUEST,
    MAX_LINE,
    Invalid,
    LineSplitter,
    Notification,
    Oversized,
    Request,
    RequestId,
    Response,
    RpcError,
    encode_error,
    encode_notification,
    encode_request,
    encode_result,
    parse,
)
from bridges.loglines import split_level
from wire.tasks import all_cancelled

log = logging.getLogger(__name__)

CHUNK = 256 * 1024


class ProcessGone(Exception):
    """The agent's process ended before it answered."""


class RpcFailed(Exception):
    """The agent answered a request with a JSON-RPC error."""

    def __init__(self, error: RpcError) -> None:
        super().__init__(f"{error.message} ({error.code})")
        self.error = error


class Handler(Protocol):
    """What the bridge does with what the process sends (every method is awaited in order,
    except requests, which run as their own tasks)."""

    async def on_request(self, proc: AcpProcess, request: Request) -> None:
        """A request from the agent (a permission, an elicitation); answered by the handler."""

    async def on_notifications(self, proc: AcpProcess, notes: list[Notification]) -> None:
        """Notifications that arrived together, in order (so a handler may merge them)."""

    async def on_bad_line(self, proc: AcpProcess, problem: Invalid | Oversized) -> None:
        """A line that is not JSON-RPC, or over the size cap; it was dropped."""


class AcpProcess:
    """The agent's process, spawned by :meth:`start`; :attr:`exited` resolves with its exit
    code once it ended and its output was read to the end."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        epoch: int,
        handler: Handler,
        cwd: str | None = None,
        max_line: int = MAX_LINE,
        env: dict[str, str] | None = None,
    ) -> None:
        if not argv:
            raise ValueError("the agent's command is empty")
        self.argv = list(argv)
        self.epoch = epoch
        self.cwd = cwd
        self.env = env
        self.handler = handler
        self.max_line = max_line
        self.exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._proc: asyncio.subprocess.Process | None = None
        self._pending: dict[RequestId, asyncio.Future[msgspec.Raw]] = {}
        self._next_id = 0
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reader: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def pid(self) -> int | None:
        """The process id (None before start)."""
        return None if self._proc is None else self._proc.pid

    @property
    def alive(self) -> bool:
        """Whether the process runs and its stdin is open."""
        return self._proc is not None and not self.exited.done()

    async def start(self) -> None:
        """Spawn the process.

        Raises:
            OSError: the command cannot be run.
        """
        self._proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self.cwd,
            env=self.env,
            start_new_session=True,  # a signal to the bridge's group does not reach it twice
        )
        self._reader = asyncio.create_task(self._read(), name=f"acp-read-{self.epoch}")
        self._spawn(self._stderr(), "acp-stderr")
        log.info("agent process %s started (epoch %s): %s", self.pid, self.epoch, self.argv[0])

    def _spawn(self, coro: Awaitable[Any], name: str) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("agent process task failed", exc_info=exc)

    async def _stderr(self) -> None:
        assert self._proc is not None
        assert self._proc.stderr is not None
        while line := await self._proc.stderr.readline():
            text = line.decode("utf-8", "replace").rstrip()
            level, text = split_level(text, logging.WARNING)  # its own level, no second time
            log.log(level, "agent[%s]: %s", self.pid, text)

    async def _read(self) -> None:
        assert self._proc is not None
        assert self._proc.stdout is not None
        splitter = LineSplitter(self.max_line)
        stdout = self._proc.stdout
        try:
            while True:
                chunk = await stdout.read(CHUNK)
                lines = splitter.feed(chunk) if chunk else splitter.end()
                notes: list[Notification] = []
                for line in lines:
                    message = line if isinstance(line, Oversized) else parse(line)
                    if isinstance(message, Notification):
                        notes.append(message)
                        continue
                    await self._notify(notes)
                    await self._dispatch(message)
                await self._notify(notes)
                if not chunk:
                    break
        except Exception:
            log.exception("reading the agent's output failed")
        finally:
            code = await self._proc.wait()
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ProcessGone(f"the agent's process exited ({code})"))
                    fut.exception()  # a caller that gave up is not an error
            self._pending.clear()
            if not self.exited.done():
                self.exited.set_result(code)
            level = logging.INFO if self._stopping else logging.WARNING  # asked to, or not
            log.log(level, "agent process %s exited with %s (epoch %s)", self.pid, code, self.epoch)

    async def _notify(self, notes: list[Notification]) -> None:
        """Hand the notifications read so far to the handler, and forget them."""
        if not notes:
            return
        batch = notes[:]
        notes.clear()
        try:
            await self.handler.on_notifications(self, batch)
        except Exception:
            log.exception("handling %s notifications failed", len(batch))

    async def _dispatch(self, message: Request | Response | Invalid | Oversized) -> None:
        if isinstance(message, Oversized):
            log.warning("dropped a line of %s bytes (over %s)", message.size, self.max_line)
            await self.handler.on_bad_line(self, message)
            return
        if isinstance(message, Response):
            fut = self._pending.pop(message.id, None) if message.id is not None else None
            if fut is None:
                log.warning("an answer to no request of ours (id %r)", message.id)
            elif not fut.done():
                if message.error is not None:
                    fut.set_exception(RpcFailed(message.error))
                    fut.exception()
                else:
                    fut.set_result(message.result or msgspec.Raw(b"null"))
        elif isinstance(message, Request):
            self._spawn(self.handler.on_request(self, message), f"acp-{message.method}")
        else:
            log.warning("an invalid line from the agent: %s", message.reason)
            if message.id is not None:
                await self.respond_error(message.id, INVALID_REQUEST, message.reason)
            await self.handler.on_bad_line(self, message)

    async def _write(self, data: bytes) -> bool:
        """Write one line; False when the process is gone (nothing was sent)."""
        proc = self._proc
        if proc is None or proc.stdin is None or self.exited.done():
            return False
        async with self._write_lock:
            try:
                proc.stdin.write(data)
                await proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError, RuntimeError):
                return False
        return True

    def send_request(self, method: str, params: object) -> asyncio.Future[msgspec.Raw]:
        """Send a request now; the future gets its result, ``RpcFailed`` or ``ProcessGone``.
        Cancelling an ``await`` of it does not forget the request: its answer is still read."""
        self._next_id += 1
        rid = self._next_id
        fut: asyncio.Future[msgspec.Raw] = asyncio.get_running_loop().create_future()
        if self.exited.done():
            fut.set_exception(ProcessGone("the agent's process is not running"))
            fut.exception()
            return fut
        self._pending[rid] = fut

        async def send() -> None:
            if not await self._write(encode_request(rid, method, params)):
                self._pending.pop(rid, None)
                if not fut.done():
                    fut.set_exception(ProcessGone("the agent's process is not running"))
                    fut.exception()

        self._spawn(send(), f"acp-send-{method}")
        return fut

    async def request(
        self,
        method: str,
        params: object,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> Any:
        """Send a request and wait for its result (decoded JSON).

        Raises:
            RpcFailed: the agent answered with an error.
            ProcessGone: the process ended first.
            TimeoutError: no answer within ``timeout``.
        """
        fut = self.send_request(method, params)
        raw = await asyncio.wait_for(asyncio.shield(fut), timeout)
        return msgspec.json.decode(raw)

    async def notify(self, method: str, params: object) -> bool:
        """Send a notification; False when the process is gone."""
        return await self._write(encode_notification(method, params))

    async def respond(self, id: RequestId, result: object) -> bool:
        """Answer the process's request ``id``; False when the process is gone (the answer
        reached no one)."""
        return await self._write(encode_result(id, result))

    async def respond_error(self, id: RequestId | None, code: int, message: str) -> bool:
        """Answer the process's request ``id`` with an error; False when it is gone."""
        return await self._write(encode_error(id, code, message))

    async def stop(self, grace: float = 2.0) -> int | None:
        """End the process: close its stdin, then SIGTERM, then SIGKILL; wait for it."""
        proc = self._proc
        if proc is None:
            return None
        self._stopping = True
        if proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
            try:
                await asyncio.wait_for(asyncio.shield(self.exited), grace)
                break
            except TimeoutError:
                continue
        await all_cancelled(self._tasks)
        return proc.returncode
