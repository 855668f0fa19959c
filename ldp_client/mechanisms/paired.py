"""Paired reports (association): two variables of one device randomized separately and sent together.

To estimate the joint distribution of two variables (Fanti, Pihur, Erlingsson, "Building a RAPPOR with
the Unknown", PETS 2016, §4: association between RAPPOR variables), the server must know which two
reports came from the same device. Storing a client identifier would link every report of a device; a
*paired report* links exactly the two values of one report instead: the device encodes both with their
own mechanisms (:class:`~ldp_client.params.PairedParams`) and sends them in one message.

Each side is encoded exactly as in a campaign of its own mechanism whose id is
:func:`paired_side_id` ``(campaign_id, side)`` = ``"<id>/paired/first"`` or ``"<id>/paired/second"``: that id
keys RAPPOR's Bloom hashing and permanent randomized response (docs/rappor-encoding.md), so the two sides'
permanent responses are independent even when both sides report the same string. A string-RAPPOR side uses
the device's cohort from its client secret, so two string-RAPPOR sides with the same m share the cohort.
Privacy: one paired report reveals both sides, epsilon = first.epsilon + second.epsilon.

Per-report encoding uses only the OS CSPRNG and the client secret (importing this module does not import
numpy); :func:`encode_batch_paired` is for simulation and takes an explicit ``numpy.random.Generator``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.mechanisms.grr import GRREncoder
from ldp_client.mechanisms.rappor import BasicRapporEncoder, BooleanRapporEncoder, RapporEncoder
from ldp_client.mechanisms.rr import BinaryRREncoder
from ldp_client.params import (
    BasicRapporParams,
    BinaryRRParams,
    GRRParams,
    PairedParams,
    PairedSide,
    RapporParams,
)
from ldp_client.secret import ClientSecret

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["SIDES", "PairedEncoder", "PairedReport", "encode_batch_paired", "paired_side_id"]

SIDES: Final = ("first", "second")


def paired_side_id(campaign_id: str, side: str) -> str:
    """The campaign id a paired campaign's ``side`` (``"first"`` or ``"second"``) is encoded under."""
    if side not in SIDES:
        raise InvalidParameterError("side", side, "first or second")
    if not isinstance(campaign_id, str):
        raise InvalidParameterError("campaign_id", campaign_id, "a string")
    return f"{campaign_id}/paired/{side}"


@dataclass(frozen=True, slots=True)
class PairedReport:
    """One paired report: what each side's encoder returned (a bool for rr, an index for grr, a
    ``RapporReport`` for string RAPPOR, an int of bits for basic and boolean RAPPOR)."""

    first: Any
    second: Any


def _side_encoder(
    params: PairedSide, campaign_id: str, secret: ClientSecret | bytes | None
) -> Callable[[Any], Any]:
    if isinstance(params, BinaryRRParams):
        return BinaryRREncoder(params).encode
    if isinstance(params, GRRParams):
        return GRREncoder(params).encode
    if secret is None:
        raise InvalidParameterError(
            "secret", None, f"the device's client secret (a {params.name} side has a permanent response)"
        )
    if isinstance(params, RapporParams):
        return RapporEncoder(params, campaign_id=campaign_id, secret=secret).encode
    if isinstance(params, BasicRapporParams):
        return BasicRapporEncoder(params, campaign_id=campaign_id, secret=secret).encode
    return BooleanRapporEncoder(params, campaign_id=campaign_id, secret=secret).encode


class PairedEncoder:
    """Encodes a pair of values of one device into one :class:`PairedReport` (OS CSPRNG).

    Args:
        params: the paired campaign's parameters.
        campaign_id: the paired campaign's id (each side is encoded under :func:`paired_side_id`).
        secret: the device's client secret; required when a side is a RAPPOR variant.
    """

    __slots__ = ("_encoders", "campaign_id", "params")

    def __init__(
        self, params: PairedParams, *, campaign_id: str, secret: ClientSecret | bytes | None = None
    ) -> None:
        if not isinstance(params, PairedParams):
            raise InvalidParameterError("params", type(params).__name__, "a PairedParams")
        self.params = params
        self.campaign_id = campaign_id
        self._encoders = tuple(
            _side_encoder(side_params, paired_side_id(campaign_id, side), secret)
            for side, side_params in zip(SIDES, params.sides, strict=True)
        )

    def __repr__(self) -> str:
        return f"PairedEncoder(params={self.params!r}, campaign_id={self.campaign_id!r})"

    def encode(self, value: tuple[Any, Any] | Sequence[Any]) -> PairedReport:
        """One paired report of ``(first_value, second_value)``; each side's DomainError names the side.

        Values are what the side's encoder takes: a bool for rr and boolean RAPPOR, a label or index for
        grr and basic RAPPOR, a string for string RAPPOR.
        """
        if isinstance(value, str | bytes) or not isinstance(value, Sequence) or len(value) != 2:
            raise DomainError("value", value, "a pair (first_value, second_value)")
        out = []
        for side, encode, v in zip(SIDES, self._encoders, value, strict=True):
            try:
                out.append(encode(v))
            except DomainError as exc:
                raise DomainError(f"{side}.{exc.field}", exc.value, exc.allowed) from exc
        return PairedReport(first=out[0], second=out[1])


def _batch_side(
    params: PairedSide,
    campaign_id: str,
    values: Any,
    labels: Sequence[str] | None,
    cohort_words: Any,
    rng: np.random.Generator,
) -> Any:
    import numpy as np

    from ldp_client.mechanisms.rappor import encode_batch_basic, encode_batch_boolean, encode_batch_rappor

    if isinstance(params, BinaryRRParams):
        return BinaryRREncoder(params).encode_batch(values, rng)
    if isinstance(params, GRRParams):
        return GRREncoder(params).encode_batch(values, rng)
    if isinstance(params, RapporParams):
        if labels is None:
            raise InvalidParameterError("labels", None, "the strings the values index (string RAPPOR side)")
        cohorts = (cohort_words % np.uint64(params.m)).astype(np.uint32)
        return encode_batch_rappor(
            params, campaign_id=campaign_id, values=values, labels=labels, rng=rng, cohorts=cohorts
        )
    if isinstance(params, BasicRapporParams):
        return encode_batch_basic(params, values, rng)
    return encode_batch_boolean(params, values, rng)


def encode_batch_paired(
    params: PairedParams,
    *,
    campaign_id: str,
    first_values: NDArray[Any],
    second_values: NDArray[Any],
    rng: np.random.Generator,
    first_labels: Sequence[str] | None = None,
    second_labels: Sequence[str] | None = None,
) -> tuple[Any, Any]:
    """Paired reports of n simulated users (row j of both sides is user j). For simulation only.

    Each side is the batch encoder of its mechanism (fresh PRRs from ``rng``, equal in distribution to a
    fresh client secret per user) under :func:`paired_side_id`. A user's cohort on a string-RAPPOR side is
    ``w mod m`` for one uniform 64-bit word w per user, as the client derives it from its secret (an HMAC
    prefix mod m, docs/rappor-encoding.md section 4), so two string-RAPPOR sides share it when their m agree.

    Args:
        params: the paired parameters.
        campaign_id: the paired campaign's id.
        first_values, second_values: shape (n,): bools for rr and boolean RAPPOR, indices for grr, basic
            RAPPOR and string RAPPOR (indices into ``first_labels`` / ``second_labels``).
        rng: seeded generator.

    Returns:
        (first columns, second columns), each in the column format of the side's mechanism.
    """
    import numpy as np

    if not isinstance(params, PairedParams):
        raise InvalidParameterError("params", type(params).__name__, "a PairedParams")
    a = np.asarray(first_values)
    b = np.asarray(second_values)
    if a.ndim != 1 or b.shape != a.shape:
        raise InvalidParameterError(
            "second_values", (a.shape, b.shape), "two 1-D arrays of the same length (one row per user)"
        )
    words = rng.integers(0, np.iinfo(np.uint64).max, size=a.shape[0], dtype=np.uint64, endpoint=True)
    cols = []
    for side, side_params, values, labels in zip(
        SIDES, params.sides, (a, b), (first_labels, second_labels), strict=True
    ):
        cols.append(_batch_side(side_params, paired_side_id(campaign_id, side), values, labels, words, rng))
    return cols[0], cols[1]
