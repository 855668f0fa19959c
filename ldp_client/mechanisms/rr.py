"""Binary randomized response as a two-coin survey (Warner, JASA 1965): parameters, encoder and spec.

Algorithm, with the quantized thresholds ``A = params.truth_threshold`` and ``B = params.yes_threshold``
(probabilities a = A/2**32 and b = B/2**32):

1. draw a uniform 32-bit word u; if ``u < A`` report the true value;
2. otherwise draw a second uniform 32-bit word v and report "yes" (True) iff ``v < B``.

So P(yes | yes) = a + (1-a) b and P(yes | no) = (1-a) b, exactly, and the epsilon reported by
:class:`BinaryRRParams` is the one implemented. The per-report path takes u and v from one 8-byte read of
the OS CSPRNG (bytes 0-3 and 4-7, little-endian; see :mod:`ldp_client.randomness`); the batch path takes
them from a seeded numpy Generator, for simulation.

Everything else about the mechanism is :data:`SPEC` (:mod:`ldp_client.spec`): the wire layout (``rr``,
answers packed 8 per byte in ``rr_answers``, a bool ``rr_answer``), one-byte journal rows, the ``counts``
accumulator of size 2 (index 0 = "no", 1 = "yes") and the support of the items "no" and "yes".

Importing this module does not import numpy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_client import privacy
from ldp_client import randomness as _rnd
from ldp_client._prob import (
    PROB_ONE,
    largest_threshold,
    quantize_probability,
    ratio_within_exp,
    rounding_note,
    threshold_to_probability,
)
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.codecs import (
    RowField,
    bool_value,
    decode_bool_column,
    encode_bool_column,
    pack_flag_row,
    unpack_flag_row,
)
from ldp_client.domain import DomainLike, check_epsilon, make_by_fields, report_quantization
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.spec import (
    CountsView,
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

__all__ = ["SPEC", "BinaryRREncoder", "BinaryRRParams", "BinaryRRSpec", "exact_channel", "sample_rr_counts"]

_U32_MASK = PROB_ONE - 1
_from_bytes = int.from_bytes


@dataclass(frozen=True, kw_only=True)
class BinaryRRParams:
    """Binary randomized response as a two-coin survey (Warner, JASA 1965).

    The first coin is heads with ``truth_probability`` a: answer truthfully. Otherwise answer a second
    coin, "yes" with ``yes_probability`` b. So P(yes|yes) = a + (1-a) b and P(yes|no) = (1-a) b.
    Warner's form (truthful w.p. p = e^eps/(1+e^eps), else the opposite) is a = 2p - 1 = tanh(eps/2),
    b = 1/2; the classic two fair coins (a = b = 1/2) is ln 3-LDP.
    """

    name: ClassVar[str] = "rr"
    truth_probability: float
    yes_probability: float = 0.5
    truth_threshold: int = field(init=False, repr=False, compare=False)
    yes_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        a = quantize_probability("truth_probability", self.truth_probability)
        b = quantize_probability("yes_probability", self.yes_probability)
        if not 0 < a < PROB_ONE:
            raise InvalidParameterError(
                "truth_probability",
                self.truth_probability,
                "a probability in (0, 1) (0 reveals nothing)"
                + rounding_note("truth_probability", self.truth_probability, a),
            )
        if not 0 < b < PROB_ONE:
            raise InvalidParameterError(
                "yes_probability",
                self.yes_probability,
                "a probability in (0, 1)" + rounding_note("yes_probability", self.yes_probability, b),
            )
        object.__setattr__(self, "truth_threshold", a)
        object.__setattr__(self, "yes_threshold", b)

    @classmethod
    def from_epsilon(cls, epsilon: float) -> BinaryRRParams:
        """Warner's RR at ``epsilon``: truthful w.p. tanh(eps/2), rounded toward privacy (the largest
        threshold A with ln((2**32 + A) / (2**32 - A)) <= eps, decided exactly)."""
        eps = check_epsilon(epsilon)
        a = largest_threshold(
            lambda t: ratio_within_exp(PROB_ONE + t, PROB_ONE - t, eps),
            math.floor(math.tanh(eps / 2.0) * PROB_ONE),
            1,
            PROB_ONE - 1,
        )
        if a == 0:
            raise InvalidParameterError("epsilon", epsilon, "a value whose truth probability exceeds 2**-32")
        params = cls(truth_probability=threshold_to_probability(a), yes_probability=0.5)
        report_quantization(eps, params.epsilon)
        return params

    @classmethod
    def two_coin(cls, truth_probability: float = 0.5, yes_probability: float = 0.5) -> BinaryRRParams:
        """The two-coin survey; the defaults (two fair coins) give epsilon = ln 3."""
        return cls(truth_probability=truth_probability, yes_probability=yes_probability)

    @property
    def p_yes_given_yes(self) -> float:
        a = threshold_to_probability(self.truth_threshold)
        return a + (1.0 - a) * threshold_to_probability(self.yes_threshold)

    @property
    def p_yes_given_no(self) -> float:
        a = threshold_to_probability(self.truth_threshold)
        return (1.0 - a) * threshold_to_probability(self.yes_threshold)

    @property
    def epsilon(self) -> float:
        return privacy.binary_channel_epsilon(self.p_yes_given_yes, self.p_yes_given_no)


def exact_channel(params: BinaryRRParams) -> tuple[tuple[Fraction, Fraction], tuple[Fraction, Fraction]]:
    """The exact output distribution the encoder implements: ``channel[x][y] = P(report = y | value = x)``.

    Rows and columns are indexed by ``int(False) = 0`` and ``int(True) = 1``. With a = A/2**32 and
    b = B/2**32 (the quantized thresholds): P(1|1) = a + (1-a) b, P(1|0) = (1-a) b.
    """
    a = Fraction(params.truth_threshold, PROB_ONE)
    b = Fraction(params.yes_threshold, PROB_ONE)
    yes_if_no = (1 - a) * b
    yes_if_yes = a + yes_if_no
    return ((1 - yes_if_no, yes_if_no), (1 - yes_if_yes, yes_if_yes))


class BinaryRREncoder:
    """Encodes one boolean per report with two-coin randomized response.

    Args:
        params: the mechanism parameters (thresholds are taken from them once, here).

    Raises:
        InvalidParameterError: ``params`` is not a :class:`BinaryRRParams`.
    """

    __slots__ = ("_truth", "_yes", "params")

    def __init__(self, params: BinaryRRParams) -> None:
        if not isinstance(params, BinaryRRParams):
            raise InvalidParameterError("params", params, "a BinaryRRParams")
        self.params = params
        # Cached as plain ints: attribute lookups on the frozen dataclass cost more than the comparison.
        self._truth = params.truth_threshold
        self._yes = params.yes_threshold

    def __repr__(self) -> str:
        return f"BinaryRREncoder(params={self.params!r})"

    def encode(self, value: bool) -> bool:
        """Randomize one boolean with the OS CSPRNG (production path; not seedable by design).

        Raises:
            DomainError: ``value`` is not a ``bool`` (ints, numpy bools and strings are rejected rather
                than guessed at).
        """
        # bool cannot be subclassed, so an identity check on the type is exact (and fast).
        if type(value) is not bool:
            raise DomainError("value", value, "a bool (True or False)")
        r = _from_bytes(_rnd._source(8), "little")
        if (r & _U32_MASK) < self._truth:
            return value
        return (r >> 32) < self._yes

    def encode_batch(self, values: ArrayLike, rng: np.random.Generator) -> NDArray[np.bool_]:
        """Randomize a 1-D array of booleans with a seeded numpy Generator. For simulation only.

        Samples with the same quantized thresholds as :meth:`encode`: for each report, a uint32 u
        (truthful iff ``u < A``), then a uint32 v ("yes" iff ``v < B``). All u are drawn before all v,
        so a given seed always gives the same reports.

        Args:
            values: a 1-D array-like of bools, or of integers that are all 0 or 1.
            rng: an explicit :class:`numpy.random.Generator` (never the global numpy state).

        Returns:
            A bool array of shape ``(n,)``.

        Raises:
            DomainError: ``values`` is not 1-D, is not boolean/integer, or holds an integer other than 0/1.
            InvalidParameterError: ``rng`` is not a numpy Generator.
        """
        import numpy as np

        if not isinstance(rng, np.random.Generator):
            raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
        arr = _as_bool_array(values)
        n = arr.shape[0]
        u = rng.integers(0, PROB_ONE, size=(n,), dtype=np.uint32)
        v = rng.integers(0, PROB_ONE, size=(n,), dtype=np.uint32)
        out: NDArray[np.bool_] = np.less(v, np.uint32(self._yes))
        np.copyto(out, arr, where=np.less(u, np.uint32(self._truth)))
        return out


def _as_bool_array(values: ArrayLike) -> NDArray[np.bool_]:
    """Validate a batch of booleans (bool dtype, or integers all in {0, 1}) and return it as bools."""
    import numpy as np

    arr = np.asarray(values)
    if arr.ndim != 1:
        raise DomainError("values", f"<array of shape {arr.shape}>", "a 1-D array of booleans")
    if arr.size == 0:
        return np.zeros(0, dtype=np.bool_)
    if arr.dtype == np.bool_:
        return arr
    if arr.dtype.kind not in "iu":
        raise DomainError("values", f"<array of dtype {arr.dtype}>", "booleans or integers 0/1")
    if arr.min() < 0 or arr.max() > 1:
        bad = arr[(arr != 0) & (arr != 1)][0]
        raise DomainError("values", bad.item(), "booleans or integers 0/1")
    return arr.astype(np.bool_)


def sample_rr_counts(
    params: BinaryRRParams, true_counts: NDArray[np.int64] | Sequence[int], rng: np.random.Generator
) -> NDArray[np.int64]:
    """(no, yes) report counts of binary RR for ``true_counts = (no, yes)`` users. For simulation only.

    The two-coin survey (Warner, JASA 1965): a user answers truthfully with a = T_a/2^32, otherwise says
    "yes" with b = T_b/2^32. Drawn in the same two stages, so every probability is an exact quantized
    threshold: truthful yeses A ~ Bin(c_yes, a), untruthful users U ~ (c_yes - A) + Bin(c_no, 1-a), coin
    yeses B ~ Bin(U, b); yes = A + B. Marginally yes ~ Bin(c_yes, a + (1-a) b) + Bin(c_no, (1-a) b),
    independent sums, which is the law of the yes count of the per-report encoder.
    """
    import numpy as np

    from ldp_client._exact_sampling import as_counts, check_rng

    g = check_rng(rng)
    c = as_counts("true_counts", true_counts, ndim=1, shape=(2,))
    a = threshold_to_probability(params.truth_threshold)
    b = threshold_to_probability(params.yes_threshold)
    c_no, c_yes = int(c[0]), int(c[1])
    truthful_yes = int(g.binomial(c_yes, a))
    untruthful = (c_yes - truthful_yes) + int(g.binomial(c_no, 1.0 - a))
    yes = truthful_yes + int(g.binomial(untruthful, b))
    return np.array([c_no + c_yes - yes, yes], dtype=np.int64)


_ITEMS = ("no", "yes")
_ROW_FIELDS = (RowField(("rr_answers",), 1, packed=True),)  # the journal row: one byte, 0 or 1


class BinaryRRSpec(MechanismSpec[BinaryRRParams]):
    """Binary randomized response for every layer (:mod:`ldp_client.spec`).

    Wire: ``Campaign.rr`` (truth and yes probabilities), ``ReportBatch.rr_answers`` (answers packed 8 per
    byte, little bit order, zero padding), ``Report.rr_answer`` (a bool). Journal row: one byte, 0 or 1.
    Accumulator: ``counts`` of size 2 (index 0 = "no", 1 = "yes"). Items "no" and "yes": a yes report
    supports "yes" (p* = P(yes|yes), q* = P(yes|no)) and a no report supports "no" (p* = 1 - P(yes|no),
    q* = 1 - P(yes|yes)).
    """

    name: ClassVar[str] = BinaryRRParams.name
    params_type: ClassVar[type[Any]] = BinaryRRParams
    kind: ClassVar[Kind] = Kind.SUPPORT
    wire: ClassVar[WireNames] = WireNames(campaign="rr", batch="rr_answers", report="rr_answer")
    fixed_domain_size: ClassVar[int | None] = 2
    epsilon_field: ClassVar[str | None] = "truth_probability"

    def make(
        self, *, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]
    ) -> BinaryRRParams:
        at_epsilon = None if epsilon is None else functools.partial(BinaryRRParams.from_epsilon, epsilon)
        return make_by_fields(
            BinaryRRParams,
            self.name,
            epsilon=epsilon,
            domain=domain,
            fields=fields,
            takes_domain=False,
            from_epsilon=at_epsilon,
        )

    def make_args(self, params: BinaryRRParams) -> MakeArgs:
        return MakeArgs(
            fields={"truth_probability": params.truth_probability, "yes_probability": params.yes_probability}
        )

    def params_to_proto(self, params: BinaryRRParams) -> campaign_pb2.BinaryRRParams:
        return campaign_pb2.BinaryRRParams(
            truth_probability=params.truth_probability, yes_probability=params.yes_probability
        )

    def params_from_proto(self, msg: campaign_pb2.BinaryRRParams) -> BinaryRRParams:
        return BinaryRRParams(truth_probability=msg.truth_probability, yes_probability=msg.yes_probability)

    def encoder(
        self, params: BinaryRRParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        return BinaryRREncoder(params).encode

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: BinaryRRParams, columns: Any) -> None:
        msg.count, msg.rr_answers = encode_bool_column(self.wire.batch, columns)

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: BinaryRRParams, n: int) -> Any:
        return decode_bool_column(msg.rr_answers, n, self.wire.batch)

    def report_to_proto(self, msg: reports_pb2.Report, params: BinaryRRParams, output: Any) -> None:
        msg.rr_answer = bool_value("report", output)

    def report_from_proto(self, msg: reports_pb2.Report, params: BinaryRRParams) -> Any:
        import numpy as np

        return np.array([msg.rr_answer], dtype=np.bool_)

    def batch_from_reports(self, params: BinaryRRParams, reports: Sequence[Any]) -> Any:
        import numpy as np

        return np.array([bool_value(f"reports[{i}]", r) for i, r in enumerate(reports)], dtype=np.bool_)

    def row_fields(self, params: BinaryRRParams) -> tuple[RowField, ...]:
        return _ROW_FIELDS

    def row_packer(self, params: BinaryRRParams) -> Callable[[Any], bytes]:
        return pack_flag_row

    def row_unpacker(self, params: BinaryRRParams) -> Callable[[bytes], Any]:
        return unpack_flag_row

    def encode_batch(
        self,
        params: BinaryRRParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        return BinaryRREncoder(params).encode_batch(values == 1, rng)

    def sum_sampler(self, params: BinaryRRParams) -> SumSampler | None:
        def sample(
            true_counts: NDArray[np.int64],
            rng: np.random.Generator,
            *,
            campaign_id: str,
            labels: Sequence[str],
        ) -> NDArray[np.int64]:
            return sample_rr_counts(params, true_counts, rng)

        return sample

    def layout(self, params: BinaryRRParams) -> Layout:
        return Layout.counts(2)

    def layout_batch(self, params: BinaryRRParams, columns: Any) -> Any:
        import numpy as np

        arr = np.asarray(columns)
        if arr.dtype != np.bool_:
            raise InvalidReportError("reports", str(arr.dtype), "a bool array (True = 'yes') for rr")
        return arr

    def items(self, params: BinaryRRParams) -> tuple[str, ...]:
        return _ITEMS

    def input_value(self, params: BinaryRRParams, index: int) -> Any:
        return (False, True)[index]

    def support_rates(self, params: BinaryRRParams) -> tuple[tuple[float, float], tuple[float, float]]:
        yy, yn = params.p_yes_given_yes, params.p_yes_given_no
        return (1.0 - yn, yy), (1.0 - yy, yn)

    def support(self, params: BinaryRRParams, acc: CountsView, candidates: Sequence[str] = ()) -> Support:
        p_star, q_star = self.support_rates(params)
        return Support(labels=_ITEMS, counts=acc.counts, n=acc.n, p_star=p_star, q_star=q_star)

    def report_likelihood(
        self, params: BinaryRRParams, columns: Any
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        import numpy as np

        y = np.asarray(columns, dtype=bool)
        pyy, pyn = params.p_yes_given_yes, params.p_yes_given_no
        lik = np.where(y[:, None], np.array([pyn, pyy]), np.array([1.0 - pyn, 1.0 - pyy]))
        return np.log(lik), np.zeros(y.size)

    def report_patterns(self, params: BinaryRRParams) -> int | None:
        return 2

    def pattern_index(self, params: BinaryRRParams, columns: Any) -> NDArray[np.int64]:
        import numpy as np

        return np.asarray(columns).astype(np.int64)

    def pattern_columns(self, params: BinaryRRParams, patterns: NDArray[np.int64]) -> Any:
        return patterns == 1

    def examples(self) -> tuple[BinaryRRParams, ...]:
        return (
            BinaryRRParams.two_coin(),
            BinaryRRParams(truth_probability=0.3, yes_probability=0.2),
            BinaryRRParams.from_epsilon(1.0),
        )

    def exact_outputs(self, params: BinaryRRParams, value: Any) -> Mapping[Hashable, Fraction]:
        no, yes = exact_channel(params)[1 if value else 0]
        return {False: no, True: yes}


SPEC = BinaryRRSpec()
"""Binary randomized response, as :mod:`ldp_client.registry` lists it."""
