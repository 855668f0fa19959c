"""Declared domains and the small validators every mechanism's parameters share (the bottom layer).

Mechanism modules (``ldp_client/mechanisms/*.py``) build their parameter classes from these helpers, and
:mod:`ldp_client.params` re-exports :class:`Domain`, so a mechanism module never needs ``params.py`` (which
is a facade over the registry of mechanisms and imports them). Nothing here imports another module of the
project except the exception tree and the 32-bit probability helpers, and nothing imports numpy.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeAlias, TypeVar

from ldp_client._prob import threshold_to_probability
from ldp_client.errors import DomainError, InvalidParameterError, PrivacyQuantizationWarning

__all__ = [
    "MAX_DOMAIN_SIZE",
    "Domain",
    "DomainLike",
    "check_epsilon",
    "int_field",
    "make_by_fields",
    "no_more_fields",
    "pair_rounding_note",
    "parse_bool",
    "report_quantization",
    "require_domain",
    "take_field",
    "tunable_fields",
]

MAX_DOMAIN_SIZE = 1 << 24
# A from_epsilon request is "met" when quantization lowers epsilon by at most this (relative) amount.
_EPSILON_REL_TOLERANCE = 1e-6

P = TypeVar("P")


def check_epsilon(epsilon: float) -> float:
    """``epsilon`` as a float, or InvalidParameterError unless it is a finite number > 0."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float):
        raise InvalidParameterError("epsilon", epsilon, "a finite number > 0")
    if not math.isfinite(epsilon) or epsilon <= 0:
        raise InvalidParameterError("epsilon", epsilon, "a finite number > 0")
    return float(epsilon)


def pair_rounding_note(low: tuple[str, float, int], high: tuple[str, float, int]) -> str:
    """Why ``low < high`` failed although the values as written satisfy it: both were rounded."""
    (lname, lvalue, lt), (hname, hvalue, ht) = low, high
    if not lvalue < hvalue:
        return ""
    return (
        f" (probabilities are rounded to multiples of 2**-32: {lname}={lvalue!r} becomes "
        f"{threshold_to_probability(lt)!r} and {hname}={hvalue!r} becomes {threshold_to_probability(ht)!r}; "
        f"make them differ by at least 2**-32, about 2.3e-10)"
    )


def report_quantization(requested: float, effective: float) -> None:
    """Warn (PrivacyQuantizationWarning) when 32-bit rounding lowered a requested epsilon materially.

    Called directly by a ``from_epsilon`` constructor: the warning points at that constructor's caller.
    """
    if requested - effective > _EPSILON_REL_TOLERANCE * max(1.0, requested):
        warnings.warn(
            f"epsilon={requested!r} cannot be met exactly with 32-bit probabilities; "
            f"the mechanism guarantees epsilon={effective!r} instead",
            PrivacyQuantizationWarning,
            stacklevel=3,
        )


@dataclass(frozen=True, slots=True)
class Domain:
    """A declared, finite domain: labels (strings) or the integers 0..size-1.

    Values outside the domain are rejected by :meth:`index`, never mapped to another value.
    """

    size: int
    labels: tuple[str, ...] | None = None
    _index: dict[str, int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int):
            raise InvalidParameterError("domain", self.size, f"an integer size in [2, {MAX_DOMAIN_SIZE}]")
        if not 2 <= self.size <= MAX_DOMAIN_SIZE:
            raise InvalidParameterError("domain", self.size, f"a size in [2, {MAX_DOMAIN_SIZE}]")
        index: dict[str, int] = {}
        if self.labels is not None:
            if len(self.labels) != self.size:
                raise InvalidParameterError("domain", self.labels, f"{self.size} labels")
            for i, label in enumerate(self.labels):
                if not isinstance(label, str):
                    raise InvalidParameterError("domain", label, "labels that are strings")
                if label in index:
                    raise InvalidParameterError("domain", label, "distinct labels (this one is repeated)")
                index[label] = i
        object.__setattr__(self, "_index", index)

    @classmethod
    def of(cls, spec: int | Iterable[str] | Domain) -> Domain:
        """A domain from a size ``d`` (values 0..d-1) or from a sequence of distinct string labels."""
        if isinstance(spec, Domain):
            return spec
        if isinstance(spec, bool):
            raise InvalidParameterError("domain", spec, "a size or a sequence of labels")
        if isinstance(spec, int):
            return cls(size=spec)
        if isinstance(spec, str | bytes):
            raise InvalidParameterError("domain", spec, "a size or a sequence of labels, not one string")
        try:
            labels = tuple(spec)
        except TypeError:
            raise InvalidParameterError("domain", spec, "a size or a sequence of labels") from None
        if len(labels) < 2:
            raise InvalidParameterError("domain", labels, "at least 2 values")
        return cls(size=len(labels), labels=labels)

    def index(self, value: object, field_name: str = "value") -> int:
        """The index of ``value``; raises :class:`DomainError` if it is not in the domain."""
        if self.labels is None:
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < self.size:
                return value
            raise DomainError(field_name, value, f"an integer in [0, {self.size - 1}]")
        if isinstance(value, str):
            i = self._index.get(value)
            if i is not None:
                return i
        raise DomainError(field_name, value, f"one of the {self.size} declared labels")

    def label(self, index: int) -> str:
        """Display label of an index (the label, or the integer as a string)."""
        return self.labels[index] if self.labels is not None else str(index)

    def value(self, index: int) -> str | int:
        """The value an encoder takes for ``index``: the label, or the integer itself."""
        return self.labels[index] if self.labels is not None else index


DomainLike: TypeAlias = int | Sequence[str] | Domain
"""What a ``domain`` argument accepts: a size, distinct string labels, or a :class:`Domain`."""


# ------------------------------------------------------------------------- fields given by name


def int_field(name: str, value: object, lo: int, hi: int) -> int:
    """``value`` if it is an int (not a bool) in [lo, hi], else InvalidParameterError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidParameterError(name, value, f"an integer in [{lo}, {hi}]")
    return value


def take_field(fields: dict[str, object], name: str, kind: type, mechanism: str) -> object:
    """Pop field ``name`` from a make_params ``fields`` dict, converting a string to ``kind``."""
    raw = fields.pop(name)
    if not isinstance(raw, str):
        return raw
    try:
        return kind(raw)
    except ValueError:
        allowed = "an integer" if kind is int else "a number" if kind is float else "a string"
        raise InvalidParameterError(f"param {name}", raw, f"{allowed} (a field of {mechanism})") from None


def no_more_fields(fields: dict[str, object], mechanism: str, allowed: Sequence[str]) -> None:
    """InvalidParameterError naming the first field left in ``fields`` (none is allowed any more)."""
    if fields:
        name = sorted(fields)[0]
        raise InvalidParameterError(
            f"param {name}", fields[name], f"a field of {mechanism}: {', '.join(allowed) or 'none'}"
        )


def require_domain(domain: object, mechanism: str) -> Domain:
    """The :class:`Domain` of a required ``domain`` argument (None names the mechanism that needs it)."""
    if domain is None:
        raise InvalidParameterError("domain", None, f"a size or labels (required by {mechanism})")
    return Domain.of(domain)  # type: ignore[arg-type]


def parse_bool(text: str) -> bool:
    """``true``/``false`` (also ``yes``/``no``, ``1``/``0``, any case) from a command line or file."""
    low = text.strip().lower()
    if low in ("true", "yes", "1"):
        return True
    if low in ("false", "no", "0"):
        return False
    raise ValueError(text)


def tunable_fields(cls: type) -> dict[str, type]:
    """Init fields of a parameter dataclass settable by name (``--param NAME=VALUE``), with their types."""
    kinds: dict[str, type] = {}
    for f in fields(cls):
        if f.init and f.name != "domain":
            kinds[f.name] = int if f.type in ("int", int) else bool if f.type in ("bool", bool) else float
    return kinds


def make_by_fields(
    cls: type[P],
    mechanism: str,
    *,
    epsilon: float | None,
    domain: object,
    fields: dict[str, object] | None,
    takes_domain: bool,
    from_epsilon: Callable[[], P] | None,
) -> P:
    """``make_params`` for a parameter dataclass whose init fields are set by name.

    Every field of ``fields`` must be an init field of ``cls`` (strings are converted to the field's type);
    ``domain`` is required exactly when ``takes_domain``; ``epsilon`` is allowed only without other fields
    and when ``from_epsilon`` (called with no argument, it builds the parameters at that epsilon) is given.

    Raises:
        InvalidParameterError: an unknown field, a value of the wrong type, a missing or unexpected domain,
            epsilon where it is not allowed, or a missing required field (the message names it).
    """
    kinds = tunable_fields(cls)
    kwargs: dict[str, Any] = {}
    for name, raw in (fields or {}).items():
        if name not in kinds:
            allowed = ", ".join(sorted(kinds)) or "none"
            raise InvalidParameterError(f"param {name}", raw, f"a field of {mechanism}: {allowed}")
        kind = kinds[name]
        convert = parse_bool if kind is bool else kind
        try:
            kwargs[name] = convert(raw) if isinstance(raw, str) else raw
        except ValueError:
            what = {int: "an integer", bool: "true or false"}.get(kind, "a number")
            raise InvalidParameterError(name, raw, what) from None
    if takes_domain and domain is None:
        raise InvalidParameterError("domain", None, f"a size or labels (required by {mechanism})")
    if not takes_domain and domain is not None:
        raise InvalidParameterError("domain", domain, f"nothing: {mechanism} has no declared domain")
    if epsilon is not None:
        if from_epsilon is not None and not kwargs:
            return from_epsilon()
        raise InvalidParameterError(
            "epsilon",
            epsilon,
            "only for rr and grr without other fields (RAPPOR variants are set by f, p, q)",
        )
    if takes_domain:
        kwargs["domain"] = Domain.of(domain)  # type: ignore[arg-type]
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        needed = f"the fields {mechanism} needs ({exc})"
        raise InvalidParameterError("params", sorted(kwargs), needed) from None
