"""The errors of the push package.

PushError
├── DeviceGone        the service says the token is gone: remove the device
├── Throttled         the service kept answering 429 through every try
├── ProviderError     any other failure of the provider or of the way to it
├── PayloadTooLarge   a notification that cannot fit the service's limit even cut
└── SignatureError    a webhook delivery that fails verification (S6), for receivers
    └── Duplicate     a valid delivery already accepted (a retry): answer 2xx, act once

Senders never raise these for a delivery: they return a ``Delivery``, whose
``raise_for_outcome()`` raises the matching error for a caller that wants one.
"""

from __future__ import annotations


class PushError(Exception):
    """Root of every push error."""


class DeviceGone(PushError):
    """The push service reports the device token gone; the device should be removed."""


class Throttled(PushError):
    """The push service still answered 429 after the last try."""


class ProviderError(PushError):
    """The push service or the network failed, or refused the push for another reason."""


class PayloadTooLarge(PushError):
    """The payload stays over the service's limit after cutting every text."""


class SignatureError(PushError):
    """A webhook delivery whose signature header is malformed, stale, wrong or replayed."""


class Duplicate(SignatureError):
    """A valid webhook delivery whose id was already accepted: a retry of a delivery taken.
    A receiver answers it with 2xx (so the sender stops) and does not act on it again."""
