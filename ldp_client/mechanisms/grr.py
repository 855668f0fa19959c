"""Generalized (k-ary) randomized response over a declared domain of size d: parameters, encoder, spec.

Algorithm (Kairouz, Bonawitz, Ramage, ICML 2016; "direct encoding" in Wang, Blocki, Li, Jha, USENIX
Security 2017), with the quantized threshold ``T = params.truth_threshold`` (p = T/2**32):

1. draw a uniform 32-bit word u; if ``u < T`` report the true index i;
2. otherwise draw o uniformly from ``[0, d-1)`` and report ``o + 1`` if ``o >= i`` else ``o`` -- a
   uniformly random index *other than* i.

So P(report = i | i) = p and P(report = j | i) = (1-p)/(d-1) for each j != i, exactly; epsilon =
ln(p (d-1) / (1-p)) as :class:`GRRParams` reports. The per-report path takes u and the word for o from one
8-byte read of the OS CSPRNG (bytes 0-3 and 4-7, little-endian), and draws o with Lemire's unbiased method
(:func:`ldp_client.randomness.uniform_below`), which needs another CSPRNG read only on a rejection
(probability below (d-1)/2**32). The batch path uses a seeded numpy Generator, for simulation.

Everything else about the mechanism is :data:`SPEC` (:mod:`ldp_client.spec`): the wire layout (``grr``,
little-endian uint32 indices in ``grr_indices``, ``grr_index``), u32 journal rows, the ``counts``
accumulator of size d, and the support of each domain item (the reports of that index).

Importing this module does not import numpy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from ldp_client import _oracle_math, privacy
from ldp_client import randomness as _rnd
from ldp_client._prob import PROB_ONE, quantize_probability, rounding_note, threshold_to_probability
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.codecs import (
    RowField,
    decode_index_column,
    domain_from_proto,
    domain_to_proto,
    encode_index_column,
    index_value,
    pack_u32_row,
    unpack_u32_row,
)
from ldp_client.domain import Domain, DomainLike, check_epsilon, make_by_fields, report_quantization
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.spec import (
    CountsView,
    Kind,
    Layout,
    MakeArgs,
    MechanismSpec,
    ParamsLike,
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
    "SPEC",
    "GRRCodecSpec",
    "GRREncoder",
    "GRRLike",
    "GRRParams",
    "GRRSpec",
    "exact_channel",
    "sample_grr_counts",
]

_U32_MASK = PROB_ONE - 1
_from_bytes = int.from_bytes
_uniform_below = _rnd.uniform_below


@dataclass(frozen=True, kw_only=True)
class GRRParams:
    """k-ary (generalized) randomized response over a declared domain of size d.

    Report the true value w.p. p, otherwise a uniformly random *other* value; epsilon = ln(p(d-1)/(1-p)),
    and p = e^eps/(e^eps + d - 1) at a given epsilon (Kairouz et al., ICML 2016; Wang et al., USENIX
    Security 2017, "direct encoding").
    """

    name: ClassVar[str] = "grr"
    domain: Domain
    truth_probability: float
    truth_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.domain, Domain):
            object.__setattr__(self, "domain", Domain.of(self.domain))
        t = quantize_probability("truth_probability", self.truth_probability)
        d = self.domain.size
        if not (t * d > PROB_ONE and t < PROB_ONE):
            raise InvalidParameterError(
                "truth_probability",
                self.truth_probability,
                f"a probability in (1/d, 1) = ({1 / d}, 1)"
                + rounding_note("truth_probability", self.truth_probability, t),
            )
        object.__setattr__(self, "truth_threshold", t)

    @classmethod
    def from_epsilon(cls, domain: DomainLike, epsilon: float) -> GRRParams:
        """GRR at ``epsilon``: p = e^eps/(e^eps + d - 1), rounded toward privacy (the largest threshold
        T with ln(T (d-1) / (2**32 - T)) <= eps, decided exactly)."""
        eps = check_epsilon(epsilon)
        dom = Domain.of(domain)
        d = dom.size
        t = _oracle_math.grr_like_threshold(d, eps)
        if t == 0:
            raise InvalidParameterError(
                "epsilon", epsilon, f"a value large enough to be represented at d={d}"
            )
        params = cls(domain=dom, truth_probability=threshold_to_probability(t))
        report_quantization(eps, params.epsilon)
        return params

    @property
    def p(self) -> float:
        """P(report = v | value = v)."""
        return threshold_to_probability(self.truth_threshold)

    @property
    def q(self) -> float:
        """P(report = v | value != v) = (1-p)/(d-1)."""
        return (1.0 - self.p) / (self.domain.size - 1)

    @property
    def epsilon(self) -> float:
        return privacy.grr_epsilon(self.p, self.domain.size)


def exact_channel(params: GRRParams) -> tuple[tuple[Fraction, ...], ...]:
    """The exact output distribution the encoder implements: ``channel[i][j] = P(report = j | value = i)``.

    p = T/2**32 on the diagonal and (1-p)/(d-1) elsewhere. It has d**2 entries: meant for tests and small
    domains.
    """
    d = params.domain.size
    p = Fraction(params.truth_threshold, PROB_ONE)
    q = (1 - p) / (d - 1)
    return tuple(tuple(p if j == i else q for j in range(d)) for i in range(d))


class GRREncoder:
    """Encodes one domain value per report with generalized randomized response.

    Args:
        params: the mechanism parameters (domain and truth threshold are read once, here).

    Raises:
        InvalidParameterError: ``params`` is not a :class:`GRRParams`.
    """

    __slots__ = ("_index_of", "_others", "_size", "_truth", "params")

    def __init__(self, params: GRRParams) -> None:
        if not isinstance(params, GRRParams):
            raise InvalidParameterError("params", params, "a GRRParams")
        self.params = params
        # Cached as plain ints / a bound method: the per-report path is dominated by lookups otherwise.
        self._truth = params.truth_threshold
        self._size = params.domain.size
        self._others = params.domain.size - 1
        self._index_of = params.domain.index

    def __repr__(self) -> str:
        return f"GRREncoder(params={self.params!r})"

    def encode(self, value: str | int) -> int:
        """Randomize one value (a domain label, or an int for an integer domain) with the OS CSPRNG.

        Production path; not seedable by design.

        Returns:
            The reported index in ``[0, d)``.

        Raises:
            DomainError: ``value`` is not in the declared domain (it is never mapped to another value).
        """
        index = self._index_of(value)
        r = _from_bytes(_rnd._source(8), "little")
        if (r & _U32_MASK) < self._truth:
            return index
        other = _uniform_below(self._others, r >> 32)
        return other + 1 if other >= index else other

    def encode_index(self, index: int) -> int:
        """Like :meth:`encode`, for a value already given as its index in ``[0, d)``.

        Raises:
            DomainError: ``index`` is not an int in ``[0, d)``.
        """
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self._size:
            raise DomainError("index", index, f"an integer in [0, {self._size - 1}]")
        r = _from_bytes(_rnd._source(8), "little")
        if (r & _U32_MASK) < self._truth:
            return index
        other = _uniform_below(self._others, r >> 32)
        return other + 1 if other >= index else other

    def encode_batch(self, indices: ArrayLike, rng: np.random.Generator) -> NDArray[np.int64]:
        """Randomize a 1-D array of indices with a seeded numpy Generator. For simulation only.

        Same quantized probabilities as :meth:`encode`: per report a uint32 u (truthful iff ``u < T``);
        then ``o = rng.integers(0, d-1)`` (numpy's unbiased bounded integers) and ``o + (o >= i)`` as the
        "other" value. All u are drawn before all o, so a given seed always gives the same reports.

        Args:
            indices: a 1-D array-like of integers in ``[0, d)``.
            rng: an explicit :class:`numpy.random.Generator` (never the global numpy state).

        Returns:
            An int64 array of reported indices, shape ``(n,)``.

        Raises:
            DomainError: ``indices`` is not a 1-D integer array, or holds a value outside ``[0, d)`` (the
                message names the first offending value).
            InvalidParameterError: ``rng`` is not a numpy Generator.
        """
        import numpy as np

        if not isinstance(rng, np.random.Generator):
            raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
        idx = _as_index_array(indices, self._size)
        n = idx.shape[0]
        u = rng.integers(0, PROB_ONE, size=(n,), dtype=np.uint32)
        out: NDArray[np.int64] = rng.integers(0, self._others, size=(n,), dtype=np.int64)
        out += np.greater_equal(out, idx)
        np.copyto(out, idx, where=np.less(u, np.uint32(self._truth)))
        return out


def _as_index_array(indices: ArrayLike, size: int) -> NDArray[np.int64]:
    """Validate a batch of indices (1-D, integer dtype, all in [0, size)) and return it as int64."""
    import numpy as np

    arr = np.asarray(indices)
    allowed = f"integers in [0, {size - 1}]"
    if arr.ndim != 1:
        raise DomainError("indices", f"<array of shape {arr.shape}>", f"a 1-D array of {allowed}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise DomainError("indices", f"<array of dtype {arr.dtype}>", allowed)
    # min/max first (two fast passes); locate the offender only on failure. Checking before the int64
    # conversion keeps huge uint64 values from wrapping into range.
    if arr.min() < 0 or arr.max() >= size:
        bad = arr[(arr < 0) | (arr >= size)][0]
        raise DomainError("indices", bad.item(), allowed)
    return arr.astype(np.int64, copy=False)


def sample_grr_counts(
    params: GRRParams, true_counts: NDArray[np.int64] | Sequence[int], rng: np.random.Generator
) -> NDArray[np.int64]:
    """Count of each reported value of GRR for ``true_counts[v]`` users holding v. For simulation only.

    A user holding v reports v with p = T/2^32 and otherwise a uniformly random other value (Kairouz et
    al., ICML 2016; Wang et al., USENIX Security 2017). So the truthful reports T_v ~ Bin(c_v, p),
    independently, and the c_v - T_v others are spread by
    :func:`ldp_client._exact_sampling.spread_uniform_others` (exact, O(d)). The result sums to
    sum(true_counts).
    """
    import numpy as np

    from ldp_client._exact_sampling import as_counts, check_rng, spread_uniform_others

    g = check_rng(rng)
    d = params.domain.size
    c = as_counts("true_counts", true_counts, ndim=1, shape=(d,))
    truthful = g.binomial(c, threshold_to_probability(params.truth_threshold)).astype(np.int64, copy=False)
    return truthful + spread_uniform_others(c - truthful, g)


class GRRLike(ParamsLike, Protocol):
    """What :class:`GRRCodecSpec` needs of a GRR-shaped mechanism's parameters: the domain and the rates of
    its channel (P(report = v | v) = p, P(report = u | v) = q for u != v)."""

    @property
    def domain(self) -> Domain: ...

    @property
    def p(self) -> float: ...

    @property
    def q(self) -> float: ...


G = TypeVar("G", bound=GRRLike)


class GRRCodecSpec(MechanismSpec[G]):
    """What every mechanism whose report is one index of the domain, through a GRR-shaped channel, shares
    (grr; L-GRR of :mod:`ldp_client.mechanisms.longitudinal.lgrr`): the wire layout (little-endian uint32
    indices), u32 journal rows, the ``counts`` accumulator of size d, and the support of each domain item
    (the reports of that index) with p* = ``params.p``, q* = ``params.q``; its per-report likelihoods and
    report patterns as a paired side.
    """

    kind: ClassVar[Kind] = Kind.SUPPORT
    takes_domain: ClassVar[bool] = True

    def report_bits(self, params: G) -> int:
        return _oracle_math.ceil_log2(params.domain.size)

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: G, columns: Any) -> None:
        msg.count, raw = encode_index_column(self.wire.batch, columns, params.domain.size)
        setattr(msg, self.wire.batch, raw)

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: G, n: int) -> Any:
        return decode_index_column(getattr(msg, self.wire.batch), n, params.domain.size, self.wire.batch)

    def report_to_proto(self, msg: reports_pb2.Report, params: G, output: Any) -> None:
        setattr(msg, self.wire.report, index_value("report", output, params.domain.size))

    def report_from_proto(self, msg: reports_pb2.Report, params: G) -> Any:
        import numpy as np

        d = params.domain.size
        index = getattr(msg, self.wire.report)
        if index >= d:
            raise InvalidReportError(self.wire.report, index, f"an index in [0, {d - 1}]")
        return np.array([index], dtype=np.int64)

    def batch_from_reports(self, params: G, reports: Sequence[Any]) -> Any:
        import numpy as np

        d = params.domain.size
        return np.array([index_value(f"reports[{i}]", r, d) for i, r in enumerate(reports)], dtype=np.int64)

    def row_fields(self, params: G) -> tuple[RowField, ...]:
        return (RowField((self.wire.batch,), 4),)  # the journal row: the u32 index

    def row_packer(self, params: G) -> Callable[[Any], bytes]:
        return pack_u32_row

    def row_unpacker(self, params: G) -> Callable[[bytes], Any]:
        return unpack_u32_row

    def layout(self, params: G) -> Layout:
        return Layout.counts(params.domain.size)

    def layout_batch(self, params: G, columns: Any) -> Any:
        import numpy as np

        arr = np.asarray(columns)
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
            raise InvalidReportError(
                "reports", str(arr.dtype), f"an integer array of domain indices for {self.name}"
            )
        return arr

    def items(self, params: G) -> tuple[str, ...]:
        dom = params.domain
        return tuple(dom.label(i) for i in range(dom.size))

    def input_value(self, params: G, index: int) -> Any:
        return params.domain.value(index)

    def support_rates(self, params: G) -> tuple[float, float]:
        return params.p, params.q

    def support(self, params: G, acc: CountsView, candidates: Sequence[str] = ()) -> Support:
        p_star, q_star = self.support_rates(params)
        return Support(labels=self.items(params), counts=acc.counts, n=acc.n, p_star=p_star, q_star=q_star)

    def report_likelihood(self, params: G, columns: Any) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        import math

        import numpy as np

        idx = np.asarray(columns, dtype=np.int64)
        log_lik = np.full((idx.size, params.domain.size), math.log(params.q))
        log_lik[np.arange(idx.size), idx] = math.log(params.p)
        return log_lik, np.zeros(idx.size)

    def report_patterns(self, params: G) -> int | None:
        return params.domain.size

    def pattern_index(self, params: G, columns: Any) -> NDArray[np.int64]:
        import numpy as np

        return np.asarray(columns, dtype=np.int64)

    def pattern_columns(self, params: G, patterns: NDArray[np.int64]) -> Any:
        import numpy as np

        return patterns.astype(np.int64)


class GRRSpec(GRRCodecSpec[GRRParams]):
    """Generalized randomized response for every layer (:mod:`ldp_client.spec`).

    Wire: ``Campaign.grr`` (domain, truth probability), ``ReportBatch.grr_indices`` (little-endian uint32,
    each < d), ``Report.grr_index``. Journal row: the u32 index. Accumulator: ``counts`` of size d. Items:
    the domain's values; the report v supports v, with p* = p and q* = (1-p)/(d-1). ``auto`` compares it
    (ceil(log2 d) bits per report).
    """

    name: ClassVar[str] = GRRParams.name
    params_type: ClassVar[type[Any]] = GRRParams
    kind: ClassVar[Kind] = Kind.SUPPORT
    wire: ClassVar[WireNames] = WireNames(campaign="grr", batch="grr_indices", report="grr_index")
    takes_domain: ClassVar[bool] = True
    epsilon_field: ClassVar[str | None] = "truth_probability"
    chosen_by_auto: ClassVar[bool] = True

    def make(
        self, *, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]
    ) -> GRRParams:
        at_epsilon = (
            None
            if epsilon is None or domain is None
            else functools.partial(GRRParams.from_epsilon, domain, epsilon)
        )
        return make_by_fields(
            GRRParams,
            self.name,
            epsilon=epsilon,
            domain=domain,
            fields=fields,
            takes_domain=True,
            from_epsilon=at_epsilon,
        )

    def make_args(self, params: GRRParams) -> MakeArgs:
        dom = params.domain
        return MakeArgs(
            domain=dom.labels if dom.labels is not None else dom.size,
            fields={"truth_probability": params.truth_probability},
        )

    def params_to_proto(self, params: GRRParams) -> campaign_pb2.GRRParams:
        return campaign_pb2.GRRParams(
            domain=domain_to_proto(params.domain), truth_probability=params.truth_probability
        )

    def params_from_proto(self, msg: campaign_pb2.GRRParams) -> GRRParams:
        return GRRParams(domain=domain_from_proto(msg.domain), truth_probability=msg.truth_probability)

    def encoder(
        self, params: GRRParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        return GRREncoder(params).encode

    def encode_batch(
        self,
        params: GRRParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        return GRREncoder(params).encode_batch(values, rng)

    def sum_sampler(self, params: GRRParams) -> SumSampler | None:
        def sample(
            true_counts: NDArray[np.int64],
            rng: np.random.Generator,
            *,
            campaign_id: str,
            labels: Sequence[str],
        ) -> NDArray[np.int64]:
            return sample_grr_counts(params, true_counts, rng)

        return sample

    def examples(self) -> tuple[GRRParams, ...]:
        return (
            GRRParams.from_epsilon(2, 1.0),
            GRRParams.from_epsilon(("red", "green", "blue"), 2.0),
            GRRParams(domain=Domain.of(5), truth_probability=0.5),
        )

    def exact_outputs(self, params: GRRParams, value: Any) -> Mapping[Hashable, Fraction]:
        row = exact_channel(params)[params.domain.index(value)]
        return dict(enumerate(row))


SPEC = GRRSpec()
"""Generalized randomized response, as :mod:`ldp_client.registry` lists it."""
