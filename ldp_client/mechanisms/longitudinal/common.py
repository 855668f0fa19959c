"""What the longitudinal mechanisms share: parameters by name at an epsilon with extra fields, and the
exact channel algebra (Fractions) their epsilons and tests are computed from.

Importing this module does not import numpy.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ldp_client._prob import PROB_ONE
from ldp_client.codecs import domain_from_proto, domain_to_proto
from ldp_client.domain import Domain, DomainLike, make_by_fields
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.longitudinal.memo import u32be
from ldp_client.mechanisms.numeric.base import log_ratio_up
from ldp_client.spec import MakeArgs, SecretSource, Support

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = [
    "MemoizedDomainSpec",
    "check_epsilon_inf",
    "epsilon_of",
    "grr_channel_row",
    "make_at_epsilon",
    "max_log_ratio",
    "probability",
]

P = TypeVar("P")


def check_epsilon_inf(value: object) -> float:
    """``epsilon_inf`` as a float, or InvalidParameterError unless it is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise InvalidParameterError("epsilon_inf", value, "a finite number > 0")
    return float(value)


def probability(threshold: int) -> Fraction:
    """The exact probability ``threshold / 2**32`` of a quantized coin."""
    return Fraction(threshold, PROB_ONE)


def epsilon_of(ratio: Fraction) -> float:
    """ln(ratio) of an exact worst-case ratio, rounded up (it bounds the exact value)."""
    return log_ratio_up(ratio.numerator, ratio.denominator)


def grr_channel_row(p: Fraction, size: int, value: int) -> tuple[Fraction, ...]:
    """P(out = j | in = value) of GRR with truth probability ``p`` over ``size`` values: p on ``value``,
    (1 - p)/(size - 1) elsewhere."""
    other = (1 - p) / (size - 1)
    return tuple(p if j == value else other for j in range(size))


def max_log_ratio(dists: list[Mapping[Hashable, Fraction]]) -> float:
    """ln of the largest ratio P(y | x) / P(y | x') over outputs y and inputs x, x' (exact, then rounded up);
    +inf when an output is possible for one input and not another. For tests and small parameters."""
    outputs = {y for d in dists for y, p in d.items() if p > 0}
    worst = Fraction(1)
    for y in outputs:
        probs = [d.get(y, Fraction(0)) for d in dists]
        if min(probs) == 0:
            return float("inf")
        worst = max(worst, max(probs) / min(probs))
    return epsilon_of(worst)


def make_at_epsilon(
    cls: type[P],
    mechanism: str,
    *,
    epsilon: float | None,
    domain: DomainLike | None,
    fields: dict[str, object],
    extra: Mapping[str, Callable[[object], Any]],
    from_epsilon: Callable[..., P],
) -> P:
    """Parameters by name: with ``epsilon``, ``from_epsilon(domain, epsilon, **extra fields)`` where only the
    fields of ``extra`` (name -> converter) are allowed; without it, every init field of ``cls`` by name
    (:func:`ldp_client.domain.make_by_fields`).

    Raises:
        InvalidParameterError: an unknown field, a missing domain, a value of the wrong type (named).
    """
    if epsilon is None:
        return make_by_fields(
            cls, mechanism, epsilon=None, domain=domain, fields=fields, takes_domain=True, from_epsilon=None
        )
    if domain is None:
        raise InvalidParameterError("domain", None, f"a size or labels (required by {mechanism})")
    kwargs: dict[str, Any] = {}
    for name, raw in fields.items():
        convert = extra.get(name)
        if convert is None:
            allowed = ", ".join(extra) or "none"
            raise InvalidParameterError(
                f"param {name}", raw, f"with epsilon, a field of {mechanism}: {allowed}"
            )
        kwargs[name] = convert(raw)
    return functools.partial(from_epsilon, Domain.of(domain), epsilon)(**kwargs)


class MemoizedDomainSpec:
    """What the specs of the memoized mechanisms over a declared domain share (mixed in before their codec
    base): parameters by name (with ``epsilon``: ``from_epsilon`` and the :attr:`epsilon_fields`; without:
    the :attr:`direct_fields`), the ``Campaign`` member message (``domain`` and the direct fields, same
    names), the longitudinal bound ``params.epsilon_inf``, and a device encoder that needs the client secret
    (:attr:`encoder_type`, built once per campaign: it memoizes). Never chosen by ``auto``.
    """

    name: ClassVar[str]
    params_type: ClassVar[type[Any]]
    message_type: ClassVar[type[Message]]
    direct_fields: ClassVar[tuple[str, ...]]
    epsilon_fields: ClassVar[Mapping[str, Callable[[object], Any]]]
    encoder_type: ClassVar[Callable[..., Any]]
    per_device_state: ClassVar[bool] = True
    chosen_by_auto: ClassVar[bool] = False

    def make(self, *, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]) -> Any:
        return make_at_epsilon(
            self.params_type,
            self.name,
            epsilon=epsilon,
            domain=domain,
            fields=fields,
            extra=self.epsilon_fields,
            from_epsilon=self.params_type.from_epsilon,
        )

    def memo_identity(self, params: Any, value: Any) -> bytes:
        """The value's domain index (u32, big-endian): the device ledger charges epsilon_inf once per index.

        What these mechanisms memoize is a function of the value's index (L-GRR and L-OSUE: the first round
        of that index; dBitFlip: the bits of the sampled buckets, shared by every value outside them, so
        one identity per index over-counts there, never under-counts). DomainError outside the domain.
        """
        return u32be(params.domain.index(value))

    def make_args(self, params: Any) -> MakeArgs:
        dom = params.domain
        return MakeArgs(
            domain=dom.labels if dom.labels is not None else dom.size,
            fields={f: getattr(params, f) for f in self.direct_fields},
        )

    def params_to_proto(self, params: Any) -> Message:
        direct = {f: getattr(params, f) for f in self.direct_fields}
        return self.message_type(domain=domain_to_proto(params.domain), **direct)

    def params_from_proto(self, msg: Any) -> Any:
        direct = {f: getattr(msg, f) for f in self.direct_fields}
        return self.params_type(domain=domain_from_proto(msg.domain), **direct)

    def epsilon_inf(self, params: Any) -> float:
        return float(params.epsilon_inf)

    def needs_secret(self, params: Any) -> bool:
        return True

    def support(self, params: Any, acc: Any, candidates: Sequence[str] = ()) -> Support:
        # The codec base's Support, carrying the longitudinal bound the estimates report.
        base: Support = super().support(params, acc, candidates)  # type: ignore[misc]
        return dataclasses.replace(base, epsilon_inf=self.epsilon_inf(params))

    def encoder(self, params: Any, *, campaign_id: str, secret: SecretSource | None) -> Callable[[Any], Any]:
        if secret is None:
            raise InvalidParameterError(
                "secret", None, f"the device's client secret ({self.name} memoizes from it)"
            )
        encode: Callable[[Any], Any] = self.encoder_type(
            params, campaign_id=campaign_id, secret=secret
        ).encode
        return encode
