"""Structured logs: one JSON object per line (``--log-format json``) or readable text.

Events are logged with :func:`log_event`: a short event name and a few fields (campaign id, counts,
durations). By policy nothing logged carries a report's contents, a client address or a token: the server
code passes none, and gRPC's own peer strings are never put into a log record by this package.

JSON line: ``{"ts": "2026-11-21T18:00:00.123Z", "level": "info", "logger": "ldp_aggregator",
"event": "campaign_created", "campaign": "color", ...}``. Records from other code (a plain message) get
the message as ``event``; an exception adds ``error`` (type and message) and ``traceback``.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
import traceback
from typing import Any, Final, Literal

__all__ = ["LOG_FORMATS", "JsonFormatter", "TextFormatter", "configure_logging", "log_event"]

LogFormat = Literal["json", "text"]
LOG_FORMATS: Final = ("json", "text")
_FIELDS_ATTR: Final = "ldp_fields"


def log_event(logger: logging.Logger, event: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log ``event`` with structured ``fields`` (never report contents, addresses or tokens)."""
    if logger.isEnabledFor(level):
        logger.log(level, event, extra={_FIELDS_ATTR: fields})


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)


def _timestamp(created: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created % 1 * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, event, then the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        for key, value in getattr(record, _FIELDS_ATTR, {}).items():
            if key not in doc:
                doc[key] = _plain(value)
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            doc["error"] = f"{type(exc).__name__}: {exc}"
            doc["traceback"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        return json.dumps(doc, separators=(",", ":"), allow_nan=False)


class TextFormatter(logging.Formatter):
    """``ts level logger: event key=value ...`` for people reading a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, _FIELDS_ATTR, {})
        tail = "".join(f" {k}={_plain(v)}" for k, v in fields.items())
        line = f"{_timestamp(record.created)} {record.levelname} {record.name}: {record.getMessage()}{tail}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure_logging(fmt: LogFormat | str = "text", level: int | str = logging.INFO) -> None:
    """Send every log record to stderr in ``fmt`` (replaces the root logger's handlers)."""
    if fmt not in LOG_FORMATS:
        from ldp_client.errors import InvalidParameterError

        raise InvalidParameterError("log_format", fmt, " or ".join(LOG_FORMATS))
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
