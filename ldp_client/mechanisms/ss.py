"""k-subset selection (Ye and Barg, IEEE T-IT 2018; Wang et al. 2016; Wang et al., USENIX Security 2017).

The report is a set Y of exactly k of the d domain values. With the quantized threshold T (p = T/2**32):

1. a uniform 32-bit word u decides whether Y holds the true value x (``u < T``);
2. the other k - 1 (if it does) or k (if not) members are a uniformly random subset of the d - 1 values
   other than x.

So P(Y | x) = p / C(d-1, k-1) if x is in Y and (1-p) / C(d-1, k) otherwise, exactly, and epsilon =
ln(p (d-k) / ((1-p) k)) as :class:`SubsetSelectionParams` reports.

Per report (OS CSPRNG, one read of 4 + (d - 1) + 32 bytes) step 2 is
:func:`ldp_client._bytesample.subset_from_keys` over the d - 1 other positions (one key byte per
position, ties broken uniformly), whose bits are then spread around x. The
batch encoder (seeded numpy Generator, for simulation) builds each row's other members with
:func:`ldp_client.mechanisms.adjust_to_counts`: from an empty row for k <= 32, else from
independent Bernoulli(k/(d-1)) bits, adding or removing uniformly random positions until the row has
exactly k - 1 or k of them (equivariant steps from an exchangeable start: a uniform subset).

Reports are ints with exactly k bits set (bit i = value i) per report and packed uint8 rows
``(n, ceil(d/8))`` in little bit order in batches.

Everything else about the mechanism is :data:`SPEC` (:mod:`ldp_client.spec`): the wire layout (``ss`` with
``SubsetSelectionParams``; d-bit rows with exactly k bits set in ``ss_bits``), the journal row (the row
bytes) and the ``support`` accumulator of d counts (a report supports every value in it).

Importing this module does not import numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations
from math import comb
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_client import _bytesample, _oracle_math
from ldp_client import randomness as _rnd
from ldp_client._prob import PROB_ONE, quantize_probability, rounding_note, threshold_to_probability
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.codecs import domain_from_proto, domain_to_proto
from ldp_client.domain import (
    Domain,
    check_epsilon,
    int_field,
    no_more_fields,
    report_quantization,
    require_domain,
    take_field,
)
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.mechanisms._oracle import BitRowsSpec, FrequencyOracle, as_domain
from ldp_client.spec import MakeArgs, SecretSource, WireNames

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

__all__ = [
    "SPEC",
    "SubsetSelectionEncoder",
    "SubsetSelectionParams",
    "SubsetSelectionSpec",
    "exact_report_probability",
]

_from_bytes = int.from_bytes
# Subset sizes up to this are placed one position at a time from empty rows; above it the batch encoder
# starts from dense Bernoulli rows and corrects the counts (about sqrt(k) corrections per row).
_SPARSE_MAX_K = 32


@dataclass(frozen=True, kw_only=True)
class SubsetSelectionParams(FrequencyOracle):
    """k-subset selection (Ye and Barg, IEEE T-IT 2018; Wang et al. 2016, "Mutual information optimally
    local private discrete distribution estimation").

    The report is a set Y of exactly k of the d values: w.p. p = ``truth_probability`` it holds x plus
    k-1 values drawn uniformly from the other d-1, otherwise k values drawn uniformly from the other d-1.
    Y supports every v in it: p* = p, q* = p (k-1)/(d-1) + (1-p) k/(d-1). epsilon = ln(p (d-k)/((1-p) k));
    at a given epsilon p = k e^eps/(k e^eps + d - k). The optimal k is about d/(e^eps + 1)
    (:func:`ldp_client._oracle_math.best_ss_k` finds it exactly); k = 1 is GRR. Reports are packed
    d-bit rows with exactly k bits set.
    """

    name: ClassVar[str] = "ss"
    k: int
    truth_probability: float
    truth_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        as_domain(self)
        d = self.domain.size
        int_field("k", self.k, 1, d - 1)
        t = quantize_probability("truth_probability", self.truth_probability)
        if not (t * d > self.k * PROB_ONE and t < PROB_ONE):
            raise InvalidParameterError(
                "truth_probability",
                self.truth_probability,
                f"a probability in (k/d, 1) = ({self.k / d}, 1)"
                + rounding_note("truth_probability", self.truth_probability, t),
            )
        object.__setattr__(self, "truth_threshold", t)

    @property
    def p_star(self) -> float:
        return threshold_to_probability(self.truth_threshold)

    @property
    def q_star(self) -> float:
        return _oracle_math.ss_q_star(self.p_star, self.domain.size, self.k)

    @property
    def epsilon(self) -> float:
        return _oracle_math.ss_epsilon(self.p_star, self.domain.size, self.k)

    @property
    def report_bits(self) -> int:
        return self.domain.size

    @property
    def num_bytes(self) -> int:
        """Bytes of one packed report: ceil(d/8)."""
        return (self.domain.size + 7) // 8

    @classmethod
    def from_epsilon(
        cls, domain: int | Sequence[str] | Domain, epsilon: float, *, k: int | None = None
    ) -> SubsetSelectionParams:
        """Subset selection at ``epsilon`` with subset size k (default: the variance-optimal k*), and
        p = k e^eps/(k e^eps + d - k) rounded down to a multiple of 2**-32."""
        eps = check_epsilon(epsilon)
        dom = Domain.of(domain)
        d = dom.size
        if k is None:
            k = _oracle_math.best_ss_k(d, eps)
        int_field("k", k, 1, d - 1)
        t = _oracle_math.ss_threshold(d, k, eps)
        if t == 0:
            raise InvalidParameterError(
                "epsilon", epsilon, f"a value large enough to be represented at k={k}"
            )
        params = cls(domain=dom, k=k, truth_probability=threshold_to_probability(t))
        report_quantization(eps, params.epsilon)
        return params

    @classmethod
    def _make(
        cls, *, epsilon: float | None, domain: object, fields: dict[str, object]
    ) -> SubsetSelectionParams:
        dom = require_domain(domain, cls.name)
        k = take_field(fields, "k", int, cls.name) if "k" in fields else None
        if epsilon is not None:
            no_more_fields(fields, cls.name, ("k",))
            return cls.from_epsilon(dom, epsilon, k=k)  # type: ignore[arg-type]
        tp = (
            take_field(fields, "truth_probability", float, cls.name)
            if "truth_probability" in fields
            else None
        )
        no_more_fields(fields, cls.name, ("k", "truth_probability"))
        if k is None or tp is None:
            raise InvalidParameterError(
                "params", [], "epsilon (and optionally k), or k and truth_probability"
            )
        return cls(domain=dom, k=k, truth_probability=tp)  # type: ignore[arg-type]


def exact_report_probability(params: SubsetSelectionParams, value: int, report: int) -> Fraction:
    """P(report | value) exactly: p/C(d-1, k-1) if bit ``value`` is set, (1-p)/C(d-1, k) otherwise, and 0
    for a report without exactly k bits (for tests and small domains)."""
    d, k = params.domain.size, params.k
    if report.bit_count() != k or report >> d:
        return Fraction(0)
    p = Fraction(params.truth_threshold, PROB_ONE)
    if (report >> value) & 1:
        return p / comb(d - 1, k - 1)
    return (1 - p) / comb(d - 1, k)


class SubsetSelectionEncoder:
    """Encodes one domain value per report with k-subset selection.

    Raises:
        InvalidParameterError: ``params`` is not a :class:`SubsetSelectionParams`.
    """

    __slots__ = ("_index_of", "_k", "_size", "_truth", "params")

    def __init__(self, params: SubsetSelectionParams) -> None:
        if not isinstance(params, SubsetSelectionParams):
            raise InvalidParameterError("params", type(params).__name__, "a SubsetSelectionParams")
        self.params = params
        self._size = params.domain.size
        self._k = params.k
        self._truth = params.truth_threshold
        self._index_of = params.domain.index

    def __repr__(self) -> str:
        return f"SubsetSelectionEncoder(params={self.params!r})"

    def encode(self, value: str | int) -> int:
        """Randomize one value (a label, or an int for an integer domain) with the OS CSPRNG.

        Returns:
            The subset as an int with exactly k bits set (bit i = value i).

        Raises:
            DomainError: ``value`` is not in the declared domain.
        """
        return self._encode(self._index_of(value))

    def encode_index(self, index: int) -> int:
        """Like :meth:`encode`, for a value given as its index in ``[0, d)``."""
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self._size:
            raise DomainError("index", index, f"an integer in [0, {self._size - 1}]")
        return self._encode(index)

    def _encode(self, index: int) -> int:
        m = self._size - 1
        # One CSPRNG read: the coin word, m key bytes and spare tie-break words.
        buf = _rnd._source(4 + m + _bytesample.SUBSET_SPARE)
        holds = _from_bytes(buf[:4], "little") < self._truth
        size = self._k - 1 if holds else self._k
        if size == 0:
            others = 0
        elif size == m:
            others = (1 << m) - 1
        else:
            others = _bytesample.subset_from_keys(buf[4 : 4 + m], size, buf[4 + m :])
        # Positions 0..d-2 of the others are the values other than x, in order: spread them around x.
        low = others & ((1 << index) - 1)
        out = low | ((others >> index) << (index + 1))
        return out | (1 << index) if holds else out

    def encode_batch(self, indices: ArrayLike, rng: np.random.Generator) -> NDArray[np.uint8]:
        """Randomize a 1-D array of indices with a seeded numpy Generator. For simulation only.

        Per row: ``u < T`` (u a uniform uint32) decides whether x is in the subset; the k - 1 or k other
        members are a uniform subset of the other d - 1 values (module docstring).

        Returns:
            uint8 array ``(n, ceil(d/8))`` with exactly k bits set per row, little bit order.

        Raises:
            DomainError: not a 1-D integer array, or a value outside ``[0, d)``.
            InvalidParameterError: ``rng`` is not a numpy Generator.
        """
        import numpy as np

        from ldp_client.mechanisms._batchbits import (
            adjust_to_counts,
            as_index_array,
            bernoulli_rows_dense,
            set_bit,
        )

        if not isinstance(rng, np.random.Generator):
            raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
        idx = as_index_array(indices, self._size)
        n, d, k = idx.shape[0], self._size, self._k
        holds = rng.integers(0, PROB_ONE, size=n, dtype=np.uint32) < np.uint32(self._truth)
        others = np.where(holds, k - 1, k).astype(np.int64)
        if k <= _SPARSE_MAX_K:
            rows = np.zeros((n, (d + 7) // 8), dtype=np.uint8)
        else:
            # Start from independent Bernoulli(k/(d-1)) bits (an exchangeable law, about the right count),
            # clear bit x, then add or remove uniformly random positions to reach k' exactly.
            start = min(PROB_ONE - 1, round(k / (d - 1) * PROB_ONE))
            rows = bernoulli_rows_dense(start, n, d, rng)
            set_bit(rows, idx, np.zeros(n, dtype=bool))
        adjust_to_counts(rows, others, d, rng, skip=idx)
        set_bit(rows, idx, holds)
        return rows


class SubsetSelectionSpec(BitRowsSpec[Any]):
    """k-subset selection for every layer (:mod:`ldp_client.spec`).

    Wire: ``Campaign.ss`` (``SubsetSelectionParams``: domain, k, truth probability), d-bit rows with exactly
    k bits set in ``ss_bits``. Journal row: the ceil(d/8) row bytes. Accumulator: ``support`` of d counts;
    a report supports each of its k values, p* = p, q* = (p (k-1) + (1-p) k)/(d-1).
    """

    name: ClassVar[str] = SubsetSelectionParams.name
    params_type: ClassVar[type[Any]] = SubsetSelectionParams
    wire: ClassVar[WireNames] = WireNames(campaign="ss", batch="ss_bits", report="ss_bits")

    def subset_size(self, params: SubsetSelectionParams) -> int | None:
        return params.k

    def make_args(self, params: SubsetSelectionParams) -> MakeArgs:
        return MakeArgs(
            domain=self.domain_arg(params),
            fields={"k": params.k, "truth_probability": params.truth_probability},
        )

    def params_to_proto(self, params: SubsetSelectionParams) -> campaign_pb2.SubsetSelectionParams:
        return campaign_pb2.SubsetSelectionParams(
            domain=domain_to_proto(params.domain), k=params.k, truth_probability=params.truth_probability
        )

    def params_from_proto(self, msg: campaign_pb2.SubsetSelectionParams) -> SubsetSelectionParams:
        return SubsetSelectionParams(
            domain=domain_from_proto(msg.domain), k=msg.k, truth_probability=msg.truth_probability
        )

    def encoder(
        self, params: SubsetSelectionParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        return SubsetSelectionEncoder(params).encode

    def encode_batch(
        self,
        params: SubsetSelectionParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        return SubsetSelectionEncoder(params).encode_batch(values, rng)

    def examples(self) -> tuple[SubsetSelectionParams, ...]:
        return (
            SubsetSelectionParams.from_epsilon(5, 0.5),
            SubsetSelectionParams.from_epsilon(("a", "b", "c", "d"), 1.0, k=2),
            SubsetSelectionParams(domain=Domain.of(6), k=3, truth_probability=0.7),
        )

    def exact_outputs(self, params: SubsetSelectionParams, value: Any) -> Mapping[Hashable, Fraction]:
        index = params.domain.index(value)
        subsets = (sum(1 << i for i in c) for c in combinations(range(params.domain.size), params.k))
        return {r: exact_report_probability(params, index, r) for r in subsets}


SPEC = SubsetSelectionSpec()
"""k-subset selection, as :mod:`ldp_client.registry` lists it."""
