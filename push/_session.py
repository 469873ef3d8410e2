"""The aiohttp session the senders share the handling of: used as given when passed in (and
left open), else opened on first use and closed by ``aclose``."""

from __future__ import annotations

import ssl
from typing import Self

import aiohttp


class OwnedSession:
    """Base of the aiohttp senders (FCM, Web Push, webhooks): call :meth:`_own` in
    ``__init__``; :meth:`_http` is the session; ``async with`` closes it."""

    _session: aiohttp.ClientSession | None
    _owns_session: bool
    _verify: ssl.SSLContext | bool
    _session_timeout: float | None

    def _own(
        self,
        session: aiohttp.ClientSession | None,
        *,
        verify: ssl.SSLContext | bool,
        timeout: float | None = None,
    ) -> None:
        self._session = session
        self._owns_session = session is None
        self._verify = verify
        self._session_timeout = timeout

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self._verify)
            if self._session_timeout is None:
                self._session = aiohttp.ClientSession(connector=connector)
            else:
                timeout = aiohttp.ClientTimeout(total=self._session_timeout)
                self._session = aiohttp.ClientSession(connector=connector, timeout=timeout)
        return self._session

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the sender's own session (a session passed in stays open)."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None
