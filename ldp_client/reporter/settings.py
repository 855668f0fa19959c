"""The reporter's arguments, checked before anything is opened or started (one line per bad argument).

:func:`check_settings` checks every tuning and connection argument of
:class:`~ldp_client.reporter.Reporter` in the order of its signature, so that the first bad one is the one
named, and returns them as one frozen :class:`ReporterSettings`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import grpc

from ldp_client import wire
from ldp_client.errors import InvalidParameterError
from ldp_client.reporter.policy import BudgetPolicy
from ldp_client.reporter.stats import Discard
from ldp_client.secret import ClientSecret

DEFAULT_MAX_BATCH_BYTES: Final = 4_000_000  # below gRPC's default 4 MiB receive limit, with room for framing
BATCH_OVERHEAD_BYTES: Final = 1024  # ids, count and protobuf tags of a ReportBatch, generously


def check_positive(field: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidParameterError(field, value, "a finite number > 0")
    return float(value)


def check_optional_positive(field: str, value: object) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidParameterError(field, value, "a finite number > 0, or None")
    return float(value)


def check_int(field: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidParameterError(field, value, f"an integer in [{lo}, {hi}]")
    return value


@dataclass(frozen=True, slots=True)
class ReporterSettings:
    """A reporter's checked arguments (the meaning of each: :class:`~ldp_client.reporter.Reporter`)."""

    max_epsilon: float
    max_epsilon_inf: float | None
    batch_size: int
    max_batch_age_s: float
    initial_retry_delay_s: float
    max_retry_delay_s: float
    rpc_timeout_s: float
    max_pending: int
    max_batch_bytes: int
    metadata: tuple[tuple[str, str], ...]
    budget: BudgetPolicy


def check_settings(
    *,
    target: str,
    campaign_id: str,
    max_epsilon: float,
    use_cached_campaign: bool,
    on_discard: Callable[[Discard], None] | None,
    max_epsilon_inf: float | None,
    secret: ClientSecret | None,
    batch_size: int,
    max_batch_age_s: float,
    initial_retry_delay_s: float,
    max_retry_delay_s: float,
    rpc_timeout_s: float,
    max_pending: int,
    max_batch_bytes: int,
    channel_credentials: grpc.ChannelCredentials | None,
    metadata: Sequence[tuple[str, str]],
    channel: grpc.Channel | None,
    budget: BudgetPolicy | None = None,
) -> ReporterSettings:
    """Check a reporter's arguments (InvalidParameterError naming the first bad one); nothing is opened."""
    if not isinstance(campaign_id, str) or not 1 <= len(campaign_id) <= wire.MAX_ID_LENGTH:
        raise InvalidParameterError(
            "campaign_id", campaign_id, f"a string of 1 to {wire.MAX_ID_LENGTH} characters"
        )
    if channel is None and (not isinstance(target, str) or not target):
        raise InvalidParameterError("target", target, "a non-empty 'host:port' string")
    checked_max_epsilon = check_positive("max_epsilon", max_epsilon)
    checked_max_epsilon_inf = check_optional_positive("max_epsilon_inf", max_epsilon_inf)
    if secret is not None and not isinstance(secret, ClientSecret):
        raise InvalidParameterError("secret", type(secret).__name__, "a ClientSecret or None")
    if not isinstance(use_cached_campaign, bool):
        raise InvalidParameterError("use_cached_campaign", use_cached_campaign, "True or False")
    if on_discard is not None and not callable(on_discard):
        raise InvalidParameterError("on_discard", type(on_discard).__name__, "a callable or None")
    checked_batch_size = check_int("batch_size", batch_size, 1, 1_000_000)
    max_age = check_positive("max_batch_age_s", max_batch_age_s)
    initial_delay = check_positive("initial_retry_delay_s", initial_retry_delay_s)
    max_delay = check_positive("max_retry_delay_s", max_retry_delay_s)
    if initial_delay > max_delay:
        raise InvalidParameterError(
            "initial_retry_delay_s",
            initial_retry_delay_s,
            f"at most max_retry_delay_s={max_retry_delay_s}",
        )
    rpc_timeout = check_positive("rpc_timeout_s", rpc_timeout_s)
    checked_max_pending = check_int("max_pending", max_pending, 1, 1 << 40)
    checked_max_batch_bytes = check_int("max_batch_bytes", max_batch_bytes, 4096, 1 << 31)
    if channel_credentials is not None and not isinstance(channel_credentials, grpc.ChannelCredentials):
        raise InvalidParameterError(
            "channel_credentials", type(channel_credentials).__name__, "a grpc.ChannelCredentials or None"
        )
    md = tuple(metadata)
    for i, pair in enumerate(md):
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise InvalidParameterError(f"metadata[{i}]", pair, "a (key, value) tuple of strings")
        if pair[0] != pair[0].lower():
            raise InvalidParameterError(f"metadata[{i}]", pair[0], "a lower-case key (gRPC requires it)")
    if budget is not None and not isinstance(budget, BudgetPolicy):
        raise InvalidParameterError("budget", type(budget).__name__, "a BudgetPolicy or None")
    return ReporterSettings(
        max_epsilon=checked_max_epsilon,
        max_epsilon_inf=checked_max_epsilon_inf,
        batch_size=checked_batch_size,
        max_batch_age_s=max_age,
        initial_retry_delay_s=initial_delay,
        max_retry_delay_s=max_delay,
        rpc_timeout_s=rpc_timeout,
        max_pending=checked_max_pending,
        max_batch_bytes=checked_max_batch_bytes,
        metadata=md,
        budget=budget if budget is not None else BudgetPolicy(),
    )
