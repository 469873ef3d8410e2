"""Log lines leave the gateway masked (X1): a filter on the handlers masks each record's
message and traceback with the one redactor, whatever the line quotes (an agent's refusal,
an exception's text)."""

from __future__ import annotations

import logging
from collections.abc import Callable

_FORMAT = logging.Formatter()


class MaskingFilter(logging.Filter):
    """Masks a record's whole message (its arguments filled in) and its traceback."""

    def __init__(self, mask: Callable[[str], str]) -> None:
        super().__init__()
        self.mask = mask

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        shown = self.mask(message)
        if shown != message or record.args:
            record.msg, record.args = shown, None
        if record.exc_info and not record.exc_text:
            record.exc_text = _FORMAT.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.mask(record.exc_text)
        if record.stack_info:
            record.stack_info = self.mask(record.stack_info)
        return True


def mask_logs(mask: Callable[[str], str], logger: logging.Logger | None = None) -> None:
    """Put the filter on every handler of ``logger`` (the root logger by default)."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, MaskingFilter) for f in handler.filters):
            handler.addFilter(MaskingFilter(mask))
