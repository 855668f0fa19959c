"""Set-valued frequency estimation by padding and sampling, over any single-item frequency oracle.

Qin, Yang, Yu, Khalil, Xiao, Ren, "Heavy Hitter Estimation over Set-Valued Data with Local Differential
Privacy" (LDPMiner), CCS 2016; Wang, Li, Jha, "Locally Differentially Private Frequent Itemset Mining",
IEEE S&P 2018 (padding and sampling frequency oracle). A user holds a set S of at most L distinct values
of a domain of size d:

1. pad S to L items: slot i < |S| holds the i-th member of S, slot i >= |S| the dummy value d + i;
2. draw a slot uniformly from [0, L) (Lemire's unbiased method on a CSPRNG word);
3. report the slot's item with the inner oracle (GRR, OUE, SUE, OLH, BLH, SS or HR) over the extended
   domain [0, d + L) at the full epsilon.

Each member of S is reported with probability exactly 1/L; which member occupies which slot does not
matter. The output law is a mixture, over the slot, of epsilon-LDP laws, so the whole report is
epsilon-LDP for any two input sets. Reports are those of the inner oracle; the estimator multiplies the
inner estimate by L (:class:`SetValuedParams`).

Batch input (simulation): an integer matrix ``(n, L)`` whose row r lists user r's items, with -1 in
unused slots (anywhere in the row); slot i of a row with -1 is the dummy d + i.

Everything else about the mechanism is :data:`SPEC` (:mod:`ldp_client.spec`): the wire layout
(``set_valued`` with ``SetValuedParams``, whose ``inner`` oneof holds the inner oracle's message), and for
reports, journal rows and the accumulator those of the inner oracle (:meth:`SetValuedSpec.wire_names` gives
its batch and report members); the support of the d real items is the inner oracle's, with the rates above.
The inner oracles are those the ``inner`` oneof can carry, listed in :data:`INNER_SPECS` (not looked up in
:mod:`ldp_client.registry`, which imports this module). Importing this module does not import numpy.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Final

from ldp_client import randomness as _rnd
from ldp_client._oracle_choice import compare
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.codecs import RowField, domain_from_proto, domain_to_proto
from ldp_client.domain import (
    MAX_DOMAIN_SIZE,
    Domain,
    DomainLike,
    int_field,
    no_more_fields,
    require_domain,
    take_field,
)
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.mechanisms._oracle import FrequencyOracle, as_domain, domain_items
from ldp_client.mechanisms.grr import SPEC as GRR_SPEC
from ldp_client.mechanisms.grr import GRREncoder, GRRParams
from ldp_client.mechanisms.hr import SPEC as HR_SPEC
from ldp_client.mechanisms.hr import HadamardEncoder, HadamardParams
from ldp_client.mechanisms.olh import BLH_SPEC, OLH_SPEC, LocalHashEncoder, OLHParams
from ldp_client.mechanisms.ss import SPEC as SS_SPEC
from ldp_client.mechanisms.ss import SubsetSelectionEncoder, SubsetSelectionParams
from ldp_client.mechanisms.ue import OUE_SPEC, SUE_SPEC, OUEParams, SUEParams, UnaryEncoder
from ldp_client.spec import (
    Kind,
    Layout,
    MakeArgs,
    MechanismSpec,
    SecretSource,
    SumSampler,
    Support,
    WireNames,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

    from ldp_client._proto.ldp.v1 import reports_pb2

__all__ = [
    "AUTO_INNER",
    "INNER_SPECS",
    "MAX_SET_ITEMS",
    "SPEC",
    "InnerOracleParams",
    "OracleEncoder",
    "SetValuedEncoder",
    "SetValuedParams",
    "SetValuedSpec",
    "inner_spec",
    "oracle_encoder",
    "oracle_rates",
    "oracle_report_bits",
]

MAX_SET_ITEMS = 4096
AUTO_INNER = "auto"
"""``inner`` of :meth:`SetValuedParams.from_epsilon`: the lowest-variance inner oracle (as ``auto`` picks)."""

InnerOracleParams = GRRParams | OUEParams | SUEParams | OLHParams | SubsetSelectionParams | HadamardParams
OracleEncoder = GRREncoder | UnaryEncoder | LocalHashEncoder | SubsetSelectionEncoder | HadamardEncoder

# The inner oracles of a set-valued campaign: the members of the ``inner`` oneof of the SetValuedParams
# message (protos/ldp/v1/campaign.proto), each with its spec and its encoder class, in oneof order.
_INNER: Final[tuple[tuple[MechanismSpec[Any], Callable[[Any], OracleEncoder]], ...]] = (
    (GRR_SPEC, GRREncoder),
    (OUE_SPEC, UnaryEncoder),
    (SUE_SPEC, UnaryEncoder),
    (OLH_SPEC, LocalHashEncoder),
    (BLH_SPEC, LocalHashEncoder),
    (SS_SPEC, SubsetSelectionEncoder),
    (HR_SPEC, HadamardEncoder),
)
INNER_SPECS: Final[tuple[MechanismSpec[Any], ...]] = tuple(spec for spec, _ in _INNER)
"""The specs of the oracles a set-valued campaign can report with (``SetValuedParams.inner``)."""
_SPEC_OF_TYPE: Final = {spec.params_type: spec for spec in INNER_SPECS}
_SPEC_OF_NAME: Final = {spec.name: spec for spec in INNER_SPECS}
_SPEC_OF_MEMBER: Final = {spec.wire.campaign: spec for spec in INNER_SPECS}
_ENCODER_OF_TYPE: Final = {spec.params_type: encoder for spec, encoder in _INNER}
_NAMES: Final = [spec.name for spec in INNER_SPECS]
_INNER_NAMES: Final = ", ".join(_NAMES[:-1]) + " or " + _NAMES[-1]  # "grr, oue, ..., ss or hr"


def inner_spec(params: object) -> MechanismSpec[Any]:
    """The spec of a single-item oracle's parameters (one of :data:`INNER_SPECS`).

    Raises:
        InvalidParameterError: ``params`` is not the parameters of grr, oue, sue, olh, blh, ss or hr.
    """
    spec = _SPEC_OF_TYPE.get(type(params))
    if spec is None:
        raise InvalidParameterError("params", type(params).__name__, f"the parameters of {_INNER_NAMES}")
    return spec


def oracle_encoder(params: InnerOracleParams) -> OracleEncoder:
    """The per-report/batch encoder of a single-item frequency oracle's parameters.

    Raises:
        InvalidParameterError: ``params`` is not the parameters of grr, oue, sue, olh, blh, ss or hr.
    """
    make = _ENCODER_OF_TYPE.get(type(params))
    if make is None:
        raise InvalidParameterError("params", type(params).__name__, f"the parameters of {_INNER_NAMES}")
    return make(params)


def oracle_rates(params: InnerOracleParams) -> tuple[float, float]:
    """(p*, q*) of a single-item frequency oracle, GRR included (p* = p, q* = (1-p)/(d-1))."""
    p_star, q_star = inner_spec(params).support_rates(params)
    return p_star, q_star  # type: ignore[return-value]  # scalars for every single-item oracle


def oracle_report_bits(params: InnerOracleParams) -> int:
    """Upload size of one report in bits (GRR: ceil(log2 d))."""
    return inner_spec(params).report_bits(params)


def _choose_inner(size: int, epsilon: float, max_report_bits: int | None) -> InnerOracleParams:
    """The lowest-variance inner oracle over the extended domain (``inner=auto``), warning as ``auto``."""
    choice, caught = compare(INNER_SPECS, size, epsilon, max_report_bits)
    for w in caught:
        warnings.warn(w.message, w.category, stacklevel=2)
    return choice.params  # type: ignore[no-any-return]


@dataclass(frozen=True, kw_only=True)
class SetValuedParams(FrequencyOracle):
    """Set-valued frequency estimation by padding and sampling (Qin et al., "Heavy Hitter Estimation over
    Set-Valued Data with Local Differential Privacy" (LDPMiner), CCS 2016; Wang, Li, Jha, "Locally
    Differentially Private Frequent Itemset Mining", IEEE S&P 2018).

    A user holds a set S of at most L = ``max_items`` distinct values of ``domain`` (size d). It is padded
    to L items with dummies d + |S|, ..., d + L - 1, one of the L padded items is drawn uniformly, and it
    is reported with the ``inner`` frequency oracle over the extended domain of size d + L at full epsilon
    (the sampling is free: each possible input is an epsilon-LDP mixture). Each holder of v reports v
    w.p. 1/L, so with the inner rates (p_i, q_i) a report supports v w.p. p* = q_i + (p_i - q_i)/L if the
    user holds v and q* = q_i otherwise: the pure-oracle estimator with these rates is L times the inner
    estimate, and its variance (with the item's own term) follows from the same formula.
    """

    name: ClassVar[str] = "set-valued"
    max_items: int
    inner: InnerOracleParams

    def __post_init__(self) -> None:
        as_domain(self)
        d = self.domain.size
        int_field("max_items", self.max_items, 1, min(MAX_SET_ITEMS, MAX_DOMAIN_SIZE - d))
        if type(self.inner) not in _SPEC_OF_TYPE:
            raise InvalidParameterError(
                "inner", type(self.inner).__name__, f"the parameters of {_INNER_NAMES}"
            )
        size = d + self.max_items
        if self.inner.domain.size != size or self.inner.domain.labels is not None:
            raise InvalidParameterError(
                "inner.domain",
                self.inner.domain.size,
                f"the extended integer domain of size d + max_items = {size} (no labels)",
            )

    @property
    def p_star(self) -> float:
        p, q = oracle_rates(self.inner)
        return q + (p - q) / self.max_items

    @property
    def q_star(self) -> float:
        return oracle_rates(self.inner)[1]

    @property
    def epsilon(self) -> float:
        return self.inner.epsilon

    @property
    def report_bits(self) -> int:
        return oracle_report_bits(self.inner)

    @classmethod
    def from_epsilon(
        cls,
        domain: int | Sequence[str] | Domain,
        epsilon: float,
        *,
        max_items: int,
        inner: str = AUTO_INNER,
        max_report_bits: int | None = None,
    ) -> SetValuedParams:
        """Padding and sampling with ``inner`` (a mechanism name, or ``auto`` for the lowest-variance
        oracle over the extended domain within ``max_report_bits``) at ``epsilon``."""
        dom = Domain.of(domain)
        d = dom.size
        int_field("max_items", max_items, 1, min(MAX_SET_ITEMS, MAX_DOMAIN_SIZE - d))
        size = d + max_items
        if inner == AUTO_INNER:
            chosen = _choose_inner(size, epsilon, max_report_bits)
        else:
            spec = _named_inner(inner, max_report_bits)
            chosen = spec.make(epsilon=epsilon, domain=size, fields={})
        return cls(domain=dom, max_items=max_items, inner=chosen)

    @classmethod
    def _make(cls, *, epsilon: float | None, domain: object, fields: dict[str, object]) -> SetValuedParams:
        """``make_params("set-valued", ...)``: ``max_items`` and ``inner`` (a name or auto) at ``epsilon``,
        or with ``inner.NAME`` fields the inner oracle's own fields (as ``make_params(inner, fields=...)``
        takes them, with or without epsilon): the exact parameters of a campaign, which
        ``SPEC.make_args`` gives back."""
        dom = require_domain(domain, cls.name)
        allowed = ("max_items", "inner", "max_report_bits", "inner.NAME")
        if "max_items" not in fields:
            raise InvalidParameterError("max_items", None, "the largest set size L (--param max_items=L)")
        max_items = take_field(fields, "max_items", int, cls.name)
        inner = str(take_field(fields, "inner", str, cls.name)) if "inner" in fields else AUTO_INNER
        budget = take_field(fields, "max_report_bits", int, cls.name) if "max_report_bits" in fields else None
        prefix = "inner."
        inner_fields = {k.removeprefix(prefix): fields.pop(k) for k in sorted(fields) if k.startswith(prefix)}
        no_more_fields(fields, cls.name, allowed)
        if not inner_fields:
            if epsilon is None:
                raise InvalidParameterError("epsilon", None, "an epsilon > 0 for set-valued")
            return cls.from_epsilon(
                dom,
                epsilon,
                max_items=max_items,  # type: ignore[arg-type]
                inner=inner,
                max_report_bits=budget,  # type: ignore[arg-type]
            )
        if inner == AUTO_INNER:
            first = next(iter(inner_fields))
            raise InvalidParameterError(
                f"param {prefix}{first}",
                inner_fields[first],
                "fields of the oracle named by inner=NAME (not auto)",
            )
        spec = _named_inner(inner, budget)
        size = dom.size + int_field("max_items", max_items, 1, min(MAX_SET_ITEMS, MAX_DOMAIN_SIZE - dom.size))
        try:
            chosen = spec.make(epsilon=epsilon, domain=size, fields=inner_fields)
        except InvalidParameterError as exc:
            raise InvalidParameterError(f"{prefix}{exc.field}", exc.value, exc.allowed) from exc
        return cls(domain=dom, max_items=max_items, inner=chosen)  # type: ignore[arg-type]


def _named_inner(name: str, max_report_bits: object) -> MechanismSpec[Any]:
    """The inner oracle called ``name`` (no budget: that is for inner=auto only)."""
    if max_report_bits is not None:
        raise InvalidParameterError("max_report_bits", max_report_bits, "none unless inner is auto")
    spec = _SPEC_OF_NAME.get(name)
    if spec is None:
        raise InvalidParameterError("inner", name, f"{AUTO_INNER}, {_INNER_NAMES}")
    return spec


class SetValuedEncoder:
    """Encodes a set of at most L values per report by padding and sampling (module docstring).

    Raises:
        InvalidParameterError: ``params`` is not a :class:`SetValuedParams`.
    """

    __slots__ = ("_d", "_domain", "_inner", "_max", "params")

    def __init__(self, params: SetValuedParams) -> None:
        if not isinstance(params, SetValuedParams):
            raise InvalidParameterError("params", type(params).__name__, "a SetValuedParams")
        self.params = params
        self._d = params.domain.size
        self._max = params.max_items
        self._domain = params.domain
        self._inner = oracle_encoder(params.inner)

    def __repr__(self) -> str:
        return f"SetValuedEncoder(params={self.params!r})"

    @property
    def inner(self) -> OracleEncoder:
        """The inner oracle's encoder (over the extended domain of size d + L)."""
        return self._inner

    def items_of(self, values: Iterable[str | int]) -> list[int]:
        """Validate a set of values: indices of at most L distinct domain values, in the given order.

        Raises:
            DomainError: not an iterable of values (a str is one value, not a set), a value outside the
                domain, a repeated value, or more than L values.
        """
        if isinstance(values, str | bytes) or not isinstance(values, Iterable):
            raise DomainError("values", values, f"a set or sequence of at most {self._max} domain values")
        items: list[int] = []
        seen: set[int] = set()
        index = self._domain.index
        for v in values:
            i = index(v, "values")
            if i in seen:
                raise DomainError("values", v, "distinct values (this one is repeated)")
            seen.add(i)
            items.append(i)
            if len(items) > self._max:
                raise DomainError(
                    "values",
                    f"<more than {self._max} values>",
                    f"a set of at most max_items={self._max} values",
                )
        return items

    def encode(self, values: Iterable[str | int]) -> Any:
        """Randomize one user's set with the OS CSPRNG; returns the inner oracle's report.

        Raises:
            DomainError: see :meth:`items_of`.
        """
        items = self.items_of(values)
        slot = _rnd.uniform_below(self._max, int.from_bytes(_rnd._source(4), "little"))
        item = items[slot] if slot < len(items) else self._d + slot
        return self._inner.encode_index(item)

    def padded_items(self, sets: ArrayLike, rng: np.random.Generator) -> NDArray[np.int64]:
        """Steps 1-2 of the module docstring, vectorised: the sampled padded item of each row.

        Raises:
            DomainError: ``sets`` is not an integer matrix (n, L), holds a value outside [-1, d), or a row
                repeats a value.
        """
        import numpy as np

        arr = np.asarray(sets)
        L, d = self._max, self._d
        if arr.ndim != 2 or arr.shape[1] != L or (arr.size and arr.dtype.kind not in "iu"):
            raise DomainError(
                "sets", f"<array of shape {arr.shape}, dtype {arr.dtype}>", f"an integer matrix (n, {L})"
            )
        n = arr.shape[0]
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        vals = arr.astype(np.int64, copy=False)
        lo, hi = int(vals.min()), int(vals.max())
        if lo < -1 or hi >= d:
            raise DomainError(
                "sets", lo if lo < -1 else hi, f"items in [0, {d - 1}], or -1 for an empty slot"
            )
        if L > 1:
            srt = np.sort(vals, axis=1)
            dup = (srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)
            if dup.any():
                row = int(np.argmax(dup.any(axis=1)))
                raise DomainError(f"sets[{row}]", vals[row].tolist(), "distinct items in each row")
        slot = rng.integers(0, L, size=n, dtype=np.int64)
        item = vals[np.arange(n), slot]
        return np.where(item >= 0, item, d + slot)

    def encode_batch(self, sets: ArrayLike, rng: np.random.Generator) -> Any:
        """Randomize n users' sets with a seeded numpy Generator. For simulation only.

        Args:
            sets: integer matrix (n, L): row r holds user r's items, -1 in unused slots.
            rng: an explicit :class:`numpy.random.Generator`.

        Returns:
            The inner oracle's batch columns for the sampled padded items.

        Raises:
            DomainError: see :meth:`padded_items`.
            InvalidParameterError: ``rng`` is not a numpy Generator.
        """
        import numpy as np

        if not isinstance(rng, np.random.Generator):
            raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
        return self._inner.encode_batch(self.padded_items(sets, rng), rng)


class SetValuedSpec(MechanismSpec[SetValuedParams]):
    """Set-valued frequency estimation (padding and sampling) for every layer (:mod:`ldp_client.spec`).

    Wire: ``Campaign.set_valued`` (``SetValuedParams``: domain, max_items, and the inner oracle's message
    in its ``inner`` oneof). Reports, journal rows, accumulator and sum-less simulation: those of the inner
    oracle (its spec, :func:`inner_spec`), whose batch and report members :meth:`wire_names` names. Items:
    the d domain values, each with the inner oracle's support count and the rates p* = q_i + (p_i - q_i)/L,
    q* = q_i. A device encodes a set (an iterable of values); a simulated user holds the one-item set of its
    population value.
    """

    name: ClassVar[str] = SetValuedParams.name
    params_type: ClassVar[type[Any]] = SetValuedParams
    kind: ClassVar[Kind] = Kind.SUPPORT
    # Its reports are its inner oracle's: no batch or report member of its own (see wire_names).
    wire: ClassVar[WireNames] = WireNames(campaign="set_valued", batch="", report="")
    takes_domain: ClassVar[bool] = True

    def make(
        self, *, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]
    ) -> SetValuedParams:
        return SetValuedParams._make(epsilon=epsilon, domain=domain, fields=fields)

    def make_args(self, params: SetValuedParams) -> MakeArgs:
        spec = inner_spec(params.inner)
        inner = spec.make_args(params.inner)
        dom = params.domain
        fields: dict[str, object] = {"max_items": params.max_items, "inner": spec.name}
        fields.update((f"inner.{name}", value) for name, value in inner.fields.items())
        return MakeArgs(
            epsilon=inner.epsilon, domain=dom.labels if dom.labels is not None else dom.size, fields=fields
        )

    def params_to_proto(self, params: SetValuedParams) -> campaign_pb2.SetValuedParams:
        spec = inner_spec(params.inner)
        msg = campaign_pb2.SetValuedParams(domain=domain_to_proto(params.domain), max_items=params.max_items)
        getattr(msg, spec.wire.campaign).CopyFrom(spec.params_to_proto(params.inner))
        return msg

    def params_from_proto(self, msg: campaign_pb2.SetValuedParams) -> SetValuedParams:
        member = msg.WhichOneof("inner")
        spec = _SPEC_OF_MEMBER.get(member) if member is not None else None
        if member is None or spec is None:
            raise InvalidParameterError("inner", member, f"exactly one of {', '.join(_SPEC_OF_MEMBER)}")
        try:
            inner = spec.params_from_proto(getattr(msg, member))
        except InvalidParameterError as exc:
            raise InvalidParameterError(f"inner.{member}.{exc.field}", exc.value, exc.allowed) from exc
        return SetValuedParams(domain=domain_from_proto(msg.domain), max_items=msg.max_items, inner=inner)

    def wire_names(self, params: SetValuedParams) -> WireNames:
        inner = inner_spec(params.inner).wire_names(params.inner)
        return WireNames(campaign=self.wire.campaign, batch=inner.batch, report=inner.report)

    def report_bits(self, params: SetValuedParams) -> int:
        return params.report_bits

    def encoder(
        self, params: SetValuedParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        return SetValuedEncoder(params).encode

    # Codec, journal rows and accumulator: the inner oracle's, with its parameters.

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: SetValuedParams, columns: Any) -> None:
        inner_spec(params.inner).batch_to_proto(msg, params.inner, columns)

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: SetValuedParams, n: int) -> Any:
        return inner_spec(params.inner).batch_from_proto(msg, params.inner, n)

    def report_to_proto(self, msg: reports_pb2.Report, params: SetValuedParams, output: Any) -> None:
        inner_spec(params.inner).report_to_proto(msg, params.inner, output)

    def report_from_proto(self, msg: reports_pb2.Report, params: SetValuedParams) -> Any:
        return inner_spec(params.inner).report_from_proto(msg, params.inner)

    def batch_from_reports(self, params: SetValuedParams, reports: Sequence[Any]) -> Any:
        return inner_spec(params.inner).batch_from_reports(params.inner, reports)

    def row_fields(self, params: SetValuedParams) -> tuple[RowField, ...]:
        return inner_spec(params.inner).row_fields(params.inner)

    def row_packer(self, params: SetValuedParams) -> Callable[[Any], bytes]:
        return inner_spec(params.inner).row_packer(params.inner)

    def row_unpacker(self, params: SetValuedParams) -> Callable[[bytes], Any]:
        return inner_spec(params.inner).row_unpacker(params.inner)

    def encode_batch(
        self,
        params: SetValuedParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        import numpy as np

        # Each simulated user holds the one-item set {value}.
        sets = np.full((values.shape[0], params.max_items), -1, dtype=np.int64)
        sets[:, 0] = values
        return SetValuedEncoder(params).encode_batch(sets, rng)

    def sum_sampler(self, params: SetValuedParams) -> SumSampler | None:
        return None  # the support counts of different items are dependent through each user's set

    def layout(self, params: SetValuedParams) -> Layout:
        return inner_spec(params.inner).layout(params.inner)

    def layout_batch(self, params: SetValuedParams, columns: Any) -> Any:
        return inner_spec(params.inner).layout_batch(params.inner, columns)

    def items(self, params: SetValuedParams) -> tuple[str, ...]:
        return domain_items(params.domain)

    def input_value(self, params: SetValuedParams, index: int) -> Any:
        return (params.domain.value(index),)

    def items_per_user(self, params: SetValuedParams) -> tuple[int, int]:
        return (0, params.max_items)

    def support_rates(self, params: SetValuedParams) -> tuple[float, float]:
        return params.p_star, params.q_star

    def support(self, params: SetValuedParams, acc: Any, candidates: Sequence[str] = ()) -> Support:
        inner = inner_spec(params.inner).support(params.inner, acc)
        p_star, q_star = self.support_rates(params)
        return Support(
            labels=self.items(params),
            counts=inner.counts[: params.domain.size],
            n=inner.n,
            p_star=p_star,
            q_star=q_star,
        )

    def examples(self) -> tuple[SetValuedParams, ...]:
        # max_items = 1: the reported epsilon (the inner oracle's) is then attained by two one-item sets,
        # which the exhaustive check enumerates; with more items it bounds the mixture without equality.
        return (
            SetValuedParams.from_epsilon(3, 1.0, max_items=1, inner="grr"),
            SetValuedParams.from_epsilon(("a", "b", "c"), 2.0, max_items=1, inner="oue"),
            SetValuedParams(
                domain=Domain.of(2),
                max_items=1,
                inner=OLHParams(domain=Domain.of(3), g=4, truth_probability=0.6),
            ),
            SetValuedParams(
                domain=Domain.of(3),
                max_items=1,
                inner=HadamardParams(domain=Domain.of(4), truth_probability=0.7),
            ),
        )

    def exact_outputs(self, params: SetValuedParams, value: Any) -> Mapping[Hashable, Fraction]:
        spec, weight = inner_spec(params.inner), Fraction(1, params.max_items)
        out: dict[Hashable, Fraction] = {}
        for item in _slot_items(params, value):  # each of the L padded items w.p. 1/L
            for y, p in spec.exact_outputs(params.inner, item).items():
                out[y] = out.get(y, Fraction(0)) + weight * p
        return out

    def exact_output_probability(self, params: SetValuedParams, value: Any, output: Any) -> Fraction:
        spec, weight = inner_spec(params.inner), Fraction(1, params.max_items)
        return sum(
            (
                weight * spec.exact_output_probability(params.inner, item, output)
                for item in _slot_items(params, value)
            ),
            Fraction(0),
        )


def _slot_items(params: SetValuedParams, value: Any) -> list[int]:
    """The padded item of each of the L slots for a set of values (slot i >= |S| holds the dummy d + i)."""
    items = SetValuedEncoder(params).items_of(value)
    d = params.domain.size
    return [items[slot] if slot < len(items) else d + slot for slot in range(params.max_items)]


SPEC = SetValuedSpec()
"""Set-valued frequency estimation, as :mod:`ldp_client.registry` lists it."""
