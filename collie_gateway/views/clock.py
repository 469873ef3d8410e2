"""Time as the phone words it: an ask's countdown (spec A3, R1) and a list row's age.

Pure: ``now`` is passed in. A datetime without a zone is taken as UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime

from collie_gateway.strings import Catalogue


def as_utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive datetime is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def expires_label(deadline: datetime, now: datetime, catalogue: Catalogue) -> str:
    """The countdown under an ask's title (spec A3).

    Ours: the time left is rounded down, so the phone never promises more time than there is.
    60 s or more: whole minutes ("Expires in 4 min" from 4:00 to 4:59). Less than 60 s: whole
    seconds, at least 1 ("Expires in 40 s"). At or past the deadline: "Expired".
    """
    left = (as_utc(deadline) - as_utc(now)).total_seconds()
    if left <= 0:
        return catalogue["expired"]
    if left < 60:
        return catalogue.fmt("expires_in_s", n=max(1, int(left)))
    return catalogue.fmt("expires_in_min", n=int(left // 60))


def relative_time(at: datetime, now: datetime, catalogue: Catalogue) -> str:
    """How long ago ``at`` was, for a list row: "now", "5 min", "3 h", "2 d".

    Ours: rounded down; a time in the future reads "now". No "Yesterday" or dates: the gateway
    does not know the phone's time zone, so calendar days are the phone's to draw.
    """
    ago = int((as_utc(now) - as_utc(at)).total_seconds())
    if ago < 60:
        return catalogue["time_now"]
    if ago < 3600:
        return catalogue.fmt("time_min", n=ago // 60)
    if ago < 86400:
        return catalogue.fmt("time_h", n=ago // 3600)
    return catalogue.fmt("time_d", n=ago // 86400)
