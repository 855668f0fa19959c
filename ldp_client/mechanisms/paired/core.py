"""Paired reports: the parameters, the per-report encoder and the batch encoder (the package docstring says
what a paired report is; :mod:`.spec` is its mechanism spec)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeAlias

from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.mechanisms.grr import SPEC as GRR_SPEC
from ldp_client.mechanisms.grr import GRRParams
from ldp_client.mechanisms.rappor.params import BasicRapporParams, BooleanRapporParams, RapporParams
from ldp_client.mechanisms.rappor.spec import BASIC_SPEC, BOOLEAN_SPEC, RAPPOR_SPEC
from ldp_client.mechanisms.rr import SPEC as RR_SPEC
from ldp_client.mechanisms.rr import BinaryRRParams
from ldp_client.secret import ClientSecret
from ldp_client.spec import Kind, MechanismSpec, SecretSource

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "MAX_JOINT_CELLS",
    "PAIRED_SIDE_TYPES",
    "SIDES",
    "SIDE_SPECS",
    "PairedColumns",
    "PairedEncoder",
    "PairedParams",
    "PairedReport",
    "PairedSide",
    "encode_batch_paired",
    "paired_side_id",
    "side_spec",
]

SIDES: Final = ("first", "second")

PairedSide = BinaryRRParams | GRRParams | RapporParams | BasicRapporParams | BooleanRapporParams
SIDE_SPECS: Final[tuple[MechanismSpec[Any], ...]] = (
    RR_SPEC,
    GRR_SPEC,
    RAPPOR_SPEC,
    BASIC_SPEC,
    BOOLEAN_SPEC,
)
"""The mechanisms a side may use: the members of the ``PairedSide`` oneof (protos/ldp/v1/campaign.proto)."""
PAIRED_SIDE_TYPES: tuple[type, ...] = tuple(s.params_type for s in SIDE_SPECS)
_BY_TYPE: Final = {s.params_type: s for s in SIDE_SPECS}
_BY_NAME: Final = {s.name: s for s in SIDE_SPECS}
_BY_MEMBER: Final = {s.wire.campaign: s for s in SIDE_SPECS}
_SIDE_NAMES: Final = ", ".join(_BY_NAME)
MAX_JOINT_CELLS: Final = 1 << 16
"""A paired accumulator keeps the joint table of report patterns while it has at most this many cells."""

PairedColumns: TypeAlias = tuple[Any, Any]
"""Batch columns of a paired campaign: (first side's columns, second side's columns), each in the format of
its side's mechanism, with the same number of rows (row j of both is one device)."""


def side_spec(params: object) -> MechanismSpec[Any]:
    """The spec of a side's parameters (InvalidParameterError if its mechanism cannot be a side)."""
    spec = _BY_TYPE.get(type(params))
    if spec is None:
        name = getattr(params, "name", type(params).__name__)
        raise InvalidParameterError("side", name, f"the parameters of {_SIDE_NAMES}")
    return spec


@dataclass(frozen=True, kw_only=True)
class PairedParams:
    """Two variables of one device in one report, each randomized by its own mechanism (association).

    A device sends both randomized values together, so the server can estimate their joint distribution
    without storing any client identifier (Fanti, Pihur, Erlingsson, PETS 2016, §4 estimate the joint
    distribution of RAPPOR reports that come from the same client). Each side is encoded exactly as a
    campaign of its own mechanism, keyed by the campaign id "<id>/paired/first" or "<id>/paired/second"
    (:func:`paired_side_id`), so the two sides' permanent randomized responses are independent. One paired
    report reveals both sides: epsilon = first.epsilon + second.epsilon (basic sequential composition), and
    likewise for the longitudinal bound (infinite if a side is rr or grr).
    """

    name: ClassVar[str] = "paired"
    first: PairedSide
    second: PairedSide

    def __post_init__(self) -> None:
        for side in SIDES:
            value = getattr(self, side)
            if type(value) not in _BY_TYPE:
                raise InvalidParameterError(
                    side,
                    getattr(value, "name", type(value).__name__),
                    "the parameters of rr, grr, rappor, basic-rappor or boolean-rappor",
                )

    @property
    def sides(self) -> tuple[PairedSide, PairedSide]:
        return (self.first, self.second)

    @property
    def epsilon(self) -> float:
        """Epsilon of one paired report: the sum of the two sides' per-report epsilons."""
        return float(self.first.epsilon + self.second.epsilon)

    @property
    def epsilon_inf(self) -> float:
        """Longitudinal bound: the sum of the sides' bounds (+inf when a side is rr or grr)."""
        return sum((side_spec(s).epsilon_inf(s) for s in self.sides), 0.0)


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


class PairedEncoder:
    """Encodes a pair of values of one device into one :class:`PairedReport` (OS CSPRNG).

    Args:
        params: the paired campaign's parameters.
        campaign_id: the paired campaign's id (each side is encoded under :func:`paired_side_id`).
        secret: the device's client secret (or a function returning it); required when a side is a
            RAPPOR variant, and read only then.
    """

    __slots__ = ("_encoders", "campaign_id", "params")

    def __init__(
        self,
        params: PairedParams,
        *,
        campaign_id: str,
        secret: ClientSecret | bytes | Callable[[], ClientSecret] | None = None,
    ) -> None:
        if not isinstance(params, PairedParams):
            raise InvalidParameterError("params", type(params).__name__, "a PairedParams")
        self.params = params
        self.campaign_id = campaign_id
        key: SecretSource | None = None
        if isinstance(secret, bytes | bytearray):
            raw = bytes(secret)
            key = lambda: ClientSecret.from_bytes(raw)  # noqa: E731  # read only by a side that needs it
        elif secret is not None:
            key = secret
        encoders = []
        for side, side_params in zip(SIDES, params.sides, strict=True):
            spec = side_spec(side_params)
            if key is None and spec.needs_secret(side_params):
                raise InvalidParameterError(
                    "secret",
                    None,
                    f"the device's client secret (a {side_params.name} side has a permanent response)",
                )
            encoders.append(
                spec.encoder(side_params, campaign_id=paired_side_id(campaign_id, side), secret=key)
            )
        self._encoders = tuple(encoders)

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


def encode_batch_paired(
    params: PairedParams,
    *,
    campaign_id: str,
    first_values: NDArray[Any],
    second_values: NDArray[Any],
    rng: np.random.Generator,
    first_labels: Sequence[str] | None = None,
    second_labels: Sequence[str] | None = None,
) -> PairedColumns:
    """Paired reports of n simulated users (row j of both sides is user j). For simulation only.

    Each side is the batch encoder of its mechanism (fresh PRRs from ``rng``, equal in distribution to a
    fresh client secret per user) under :func:`paired_side_id`. A user's cohort on a string-RAPPOR side is
    ``w mod m`` for one uniform 64-bit word w per user, as the client derives it from its secret (an HMAC
    prefix mod m, docs/rappor-encoding.md section 4), so two string-RAPPOR sides share it when their m agree.

    Args:
        params: the paired parameters.
        campaign_id: the paired campaign's id.
        first_values, second_values: shape (n,): bools (or 0/1) for rr and boolean RAPPOR, indices for grr,
            basic RAPPOR and string RAPPOR (indices into ``first_labels`` / ``second_labels``).
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
    words: NDArray[np.uint64] = np.asarray(
        rng.integers(0, np.iinfo(np.uint64).max, size=a.shape[0], dtype=np.uint64, endpoint=True)
    )
    cols = []
    for side, side_params, values, labels in zip(
        SIDES, params.sides, (a, b), (first_labels, second_labels), strict=True
    ):
        spec = side_spec(side_params)
        if spec.kind is Kind.RAPPOR and labels is None:
            raise InvalidParameterError("labels", None, "the strings the values index (string RAPPOR side)")
        cols.append(
            spec.encode_batch_shared(
                side_params,
                _side_values(spec, side, values),
                rng,
                campaign_id=paired_side_id(campaign_id, side),
                labels=labels or (),
                device_words=words,
            )
        )
    return cols[0], cols[1]


def _side_values(spec: MechanismSpec[Any], side: str, values: NDArray[Any]) -> NDArray[Any]:
    """A side's population indices (a bool is index 0 or 1), checked where the mechanism fixes how many
    values there are (rr and boolean RAPPOR: 0 = no/false, 1 = yes/true); the others check their own."""
    import numpy as np

    size = spec.fixed_domain_size
    if size is None or values.dtype == np.bool_:
        return values
    if values.dtype.kind not in "iu" or (
        values.size and (int(values.min()) < 0 or int(values.max()) >= size)
    ):
        bad = values.dtype if values.dtype.kind not in "iu" else values[(values < 0) | (values >= size)][0]
        raise DomainError(f"{side}_values", str(bad), f"booleans or integers in [0, {size - 1}]")
    return values
