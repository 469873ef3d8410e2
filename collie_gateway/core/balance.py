"""Which agents' leases a worker gives back and which it tries to take, so that N live
workers each follow at most ⌈A/N⌉ of A agents (docs/postgresql.md, "Balance").

Pure: every worker decides for itself from the same survey of the leases table (live
workers, live leases); no worker is asked anything. A worker over its share gives back its
surplus (a clean hand-over: it stops following, flushes, gives the lease back); a worker
under its share takes free leases up to its share. A worker never takes past its share, so a
lease given back goes to one that has room; leases held by a worker that is not live (its
heartbeat ran out) are left to expire, then taken by whoever has room.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Plan:
    """What one worker does this round: leases to give back, free leases to try to take."""

    give_back: tuple[str, ...] = ()
    take: tuple[str, ...] = ()


def share(agents: int, workers: int) -> int:
    """The most agents one of ``workers`` live workers follows: ⌈agents / workers⌉."""
    return -(-agents // max(workers, 1))


def plan(
    me: str, workers: Collection[str], agents: Sequence[str], holders: Mapping[str, str]
) -> Plan:
    """The plan of worker ``me`` among the live ``workers`` (``me`` counts as live), for
    ``agents`` (in the order they are taken) whose live leases are held as ``holders``
    (agent → holder; an agent not in it is free)."""
    live = {*workers, me}
    cap = share(len(agents), len(live))
    mine = [a for a in agents if holders.get(a) == me]
    if len(mine) > cap:
        return Plan(give_back=tuple(mine[cap:]))  # the last in ``agents``' order
    room = cap - len(mine)
    free = [a for a in agents if a not in holders]
    if not free or room <= 0:
        return Plan()
    # Each worker starts at its own place in the free ones, so workers with room seldom
    # race for the same lease.
    start = zlib.crc32(me.encode()) % len(free)
    return Plan(take=tuple((free[start:] + free[:start])[:room]))
