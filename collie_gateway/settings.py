"""The gateway's settings: one frozen object, built in ``__main__`` and passed to the app."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from collie_gateway.core.reconnect import LinkTiming
from collie_gateway.services.targets import TargetsFactory
from collie_gateway.sources import Backoff, Member, Source
from collie_gateway.strings import Catalogue, Catalogues
from collie_gateway.tls import Tls

DEMO_STATE = Path("~/.collie/demo")  # where ``demo`` keeps its files (its store: collie.db)


def utc_now() -> datetime:
    """The real clock, in UTC."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything ``serving.gateway_app`` needs.

    Usage: ``Settings(sources=load_sources(path), db_path=Path("collie.db"))``.
    """

    sources: list[Source]
    db_path: Path
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    spaces: tuple[str, ...] = ()
    machine: str = "this machine"
    catalogue: Catalogue = field(default_factory=Catalogue)  # the default language's
    catalogues: Catalogues | None = None  # every language; None: the shipped ones around it
    timing: LinkTiming = field(default_factory=LinkTiming)
    clock: Callable[[], datetime] = utc_now
    phone_ring: int = 10_000  # phone events kept for Last-Event-ID replay
    stream_frame: float = 0.02  # ours: a phone's stream writes at most once a frame (seconds)
    redact: bool = True
    resend_interval: float = 30.0  # ours: unsettled answers are sent again this often
    push_targets: TargetsFactory | None = None  # APNs/FCM senders and webhooks, if any
    push_ttl: float = 3600.0  # a push without a deadline waits this long for the phone (s)
    apns_environment: str = "production"  # of an APNs token registered without one
    unix_path: Path | None = None  # serve the phone API on this Unix socket instead
    bridge_backoff: Backoff = field(default_factory=Backoff)  # restarts of bridges it runs
    crew: list[Member] = field(default_factory=list)  # member machines this lead shows (W1)
    crew_answers: bool = True  # as a member: take answers given on a lead (W4, V2)
    auth: str = "auto"  # "always": a credential on loopback too, even with no phone paired
    public_urls: tuple[str, ...] = ()  # addresses a pairing link gives the phone
    tls: Tls | None = None  # the certificate the phone API serves with (its fingerprint)
    database_url: str | None = None  # PostgreSQL instead of the file at db_path (workers)
    lease_seconds: float = 10.0  # ours: an agent's lease (workers); another takes it after

    def __post_init__(self) -> None:
        if self.catalogues is None:
            object.__setattr__(self, "catalogues", Catalogues.around(self.catalogue))
        else:
            object.__setattr__(self, "catalogue", self.catalogues.default)

    @property
    def languages(self) -> Catalogues:
        """Every language the phone is answered in; the default is ``catalogue``'s."""
        assert self.catalogues is not None  # set in __post_init__
        return self.catalogues

    @property
    def needs_token(self) -> bool:
        """A phone API on anything but loopback (or a 0600 Unix socket) requires a token."""
        return self.unix_path is None and not is_loopback(self.host)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
