"""The error of accumulator bytes that do not decode (below every accumulator module, which all raise it)."""

from __future__ import annotations

from ldp_client.errors import LdpError

__all__ = ["CorruptAccumulatorError"]


class CorruptAccumulatorError(LdpError, ValueError):
    """Serialized accumulator bytes are truncated, corrupted, or of an unknown format or version.

    Raised by ``from_bytes``; like the other validation errors it names the field, the offending value
    and what is allowed. (Stored state failing to decode is a data-loss condition, not a bad request.)
    """

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"accumulator bytes: {field}={value!r} is invalid: allowed {allowed}")
