"""PCKV-GRR: key-value pairs with correlated key and value perturbation (issue 18).

Gu, Li, Cheng, Xiong, Cao, "PCKV: Locally Differentially Private Correlated Key-Value Data Collection
with Optimized Utility", USENIX Security 2020 (§4-5). A user holds a mapping of 1 to l keys of a declared
domain of d keys to values in the campaign's range [lo, hi]; a value x is mapped to v = 2 (x - lo) /
(hi - lo) - 1 in [-1, 1]. The extended key domain has d' = d + l keys (l dummy keys). One report:

1. padding and sampling: slot i < |S| holds the i-th pair of the mapping, slot i >= |S| the dummy pair
   (d + i, 0); a slot is drawn uniformly from [0, l) (Lemire's method on a CSPRNG word), so each pair is
   sampled with probability exactly 1/l;
2. discretisation: v* = +1 with probability (1 + v) / 2, else -1 (stochastic rounding; the probability is
   rounded to a multiple of 2^-32, so E[v*] = v within 2^-32);
3. perturbation of the pair <k, v*> together (PCKV-GRR): with probability a (``key_probability``) the key
   is kept, and then the value is kept with probability b (``value_probability``) and flipped otherwise;
   with probability 1 - a a uniformly random *other* key of the d' is reported with a uniform value +-1.

So P(<k, v*>) = a b, P(<k, -v*>) = a (1 - b), P(<j, +-1>) = (1 - a) / (2 (d' - 1)) for j != k. The
report is the index 2 j + [s = +1] in [0, 2 d'). With q = (1 - a) / (d' - 1), the largest to smallest ratio
of one output's probabilities over inputs is a b / min(a (1 - b), q / 2) (PCKV Theorem 2, with e^eps1 =
a (d' - 1) / (1 - a) and e^eps2 = b / (1 - b)):

    epsilon = max(eps2, eps1 + ln(2 b)) = ln max(b / (1 - b), 2 a b (d' - 1) / (1 - a))

less than the eps1 + eps2 of perturbing key and value independently. ``from_epsilon`` chooses the split
on the boundary eps1 = epsilon - ln(2 b) that minimises the variance of the mean estimate of a rare key
(docs/key-values.md, "Budget allocation"); ``ldp_aggregator.key_values`` estimates each key's frequency and
mean value.

A mapping of more than l pairs is refused (the paper samples from such a set with probability 1/|S|, which
biases the frequency estimate down); so is an empty mapping, a key outside the domain and a value outside
[lo, hi]. Importing this module does not import numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_client import randomness as _rnd
from ldp_client._prob import PROB_ONE, largest_threshold, quantize_probability, ratio_within_exp
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
from ldp_client.domain import (
    MAX_DOMAIN_SIZE,
    Domain,
    DomainLike,
    check_epsilon,
    int_field,
    no_more_fields,
    report_quantization,
    require_domain,
    take_field,
)
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.layouts import KeyValueCounts
from ldp_client.spec import (
    CountsView,
    Kind,
    Layout,
    MakeArgs,
    MechanismSpec,
    SecretSource,
    Support,
    WireNames,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

    from ldp_client._proto.ldp.v1 import reports_pb2

__all__ = ["MAX_PADDING", "SPEC", "PCKVEncoder", "PCKVParams", "PCKVSpec", "mean_variance_factor"]

MAX_PADDING = 4096
_HALF = PROB_ONE // 2
_U32 = PROB_ONE - 1


def mean_variance_factor(a: float, b: float, extended: int, padding: int) -> float:
    """n Var[sum_hat_k] / n at a key nobody holds: l^2 q / (a (2b - 1))^2 with q = (1 - a) / (d' - 1).

    The figure ``from_epsilon`` minimises over the budget split (the variance of a rare key's mean is it
    divided by its squared frequency; docs/key-values.md).
    """
    q = (1.0 - a) / (extended - 1)
    return padding * padding * q / (a * (2.0 * b - 1.0)) ** 2


def _optimal_value_epsilon(epsilon: float, extended: int, padding: int) -> float:
    """eps2 on the boundary eps1 = epsilon - ln(2 b) minimising :func:`mean_variance_factor` (a grid over
    the admissible eps2, then a golden-section refinement; the objective is smooth and unimodal there)."""
    # eps1 >= 0 needs 2 b <= e^eps, i.e. eps2 <= ln(e^eps / (2 - e^eps)) when e^eps < 2.
    top = (
        epsilon
        if epsilon >= math.log(2.0)
        else min(epsilon, math.log(math.exp(epsilon) / (2 - math.exp(epsilon))))
    )

    def cost(e2: float) -> float:
        b = 1.0 / (1.0 + math.exp(-e2))
        e1 = epsilon - math.log(2.0 * b)
        a = 1.0 / (1.0 + (extended - 1) * math.exp(-e1))
        return mean_variance_factor(a, b, extended, padding)

    grid = [top * (i + 1) / 400 for i in range(400)]
    i = min(range(len(grid)), key=lambda j: cost(grid[j]))
    lo, hi = grid[max(i - 1, 0)] if i > 0 else top / 4000, grid[min(i + 1, len(grid) - 1)]
    g = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(60):
        x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
        if cost(x1) <= cost(x2):
            hi = x2
        else:
            lo = x1
    return (lo + hi) / 2.0


@dataclass(frozen=True, kw_only=True)
class PCKVParams:
    """PCKV-GRR over a declared domain of d keys with padding length l (Gu et al., USENIX Security 2020).

    ``key_probability`` a = P(the sampled key is kept), ``value_probability`` b = P(its discretised value
    is kept | the key is kept), both rounded to multiples of 2^-32; values are declared in [lo, hi].
    epsilon = ln max(b / (1 - b), 2 a b (d' - 1) / (1 - a)) with d' = d + l (module docstring).
    """

    name: ClassVar[str] = "pckv"
    domain: Domain
    padding: int
    key_probability: float
    value_probability: float
    lo: float = -1.0
    hi: float = 1.0
    key_threshold: int = field(init=False, repr=False, compare=False)
    value_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.domain, Domain):
            object.__setattr__(self, "domain", Domain.of(self.domain))
        d = self.domain.size
        int_field("padding", self.padding, 1, min(MAX_PADDING, MAX_DOMAIN_SIZE - d))
        for name in ("lo", "hi"):
            x = getattr(self, name)
            if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
                raise InvalidParameterError(name, x, "a finite number")
        if not self.lo < self.hi:
            raise InvalidParameterError("hi", self.hi, f"a number greater than lo={self.lo!r}")
        ta = quantize_probability("key_probability", self.key_probability)
        extended = d + self.padding
        if not (ta * extended > PROB_ONE and ta < PROB_ONE):
            raise InvalidParameterError(
                "key_probability",
                self.key_probability,
                f"a probability in (1/d', 1) with d' = d + l = {extended}",
            )
        tb = quantize_probability("value_probability", self.value_probability)
        if not _HALF < tb < PROB_ONE:
            raise InvalidParameterError(
                "value_probability", self.value_probability, "a probability in (1/2, 1)"
            )
        object.__setattr__(self, "key_threshold", ta)
        object.__setattr__(self, "value_threshold", tb)

    @property
    def extended_size(self) -> int:
        """d' = d + l: the keys and the l dummy keys."""
        return self.domain.size + self.padding

    @property
    def a(self) -> float:
        """P(report key = sampled key)."""
        return self.key_threshold / PROB_ONE

    @property
    def b(self) -> float:
        """P(report value = discretised value | the key is kept)."""
        return self.value_threshold / PROB_ONE

    @property
    def q(self) -> float:
        """P(report key = j) for each key j other than the sampled one: (1 - a) / (d' - 1)."""
        return (1.0 - self.a) / (self.extended_size - 1)

    @property
    def key_epsilon(self) -> float:
        """eps1 = ln(a (d' - 1) / (1 - a))."""
        ta = self.key_threshold
        return math.log(ta * (self.extended_size - 1)) - math.log(PROB_ONE - ta)

    @property
    def value_epsilon(self) -> float:
        """eps2 = ln(b / (1 - b))."""
        tb = self.value_threshold
        return math.log(tb) - math.log(PROB_ONE - tb)

    @property
    def epsilon(self) -> float:
        ta, tb, m = self.key_threshold, self.value_threshold, self.extended_size - 1
        # 2 a b (d'-1) / (1-a) = 2 Ta Tb m / ((2^32 - Ta) 2^32), as exact integers then one log.
        joint = math.log(2 * ta * tb * m) - math.log((PROB_ONE - ta) * PROB_ONE)
        return max(self.value_epsilon, joint)

    @classmethod
    def from_epsilon(
        cls,
        domain: DomainLike,
        epsilon: float,
        *,
        padding: int,
        lo: float = -1.0,
        hi: float = 1.0,
        value_epsilon: float | None = None,
    ) -> PCKVParams:
        """PCKV-GRR at ``epsilon``: eps2 = ``value_epsilon`` (None: the split minimising the variance of a
        rare key's mean), then b and a the largest thresholds with eps2 <= epsilon and
        eps1 + ln(2 b) <= epsilon, decided exactly (rounding toward privacy)."""
        eps = check_epsilon(epsilon)
        dom = Domain.of(domain)
        d = dom.size
        int_field("padding", padding, 1, min(MAX_PADDING, MAX_DOMAIN_SIZE - d))
        extended = d + padding
        if value_epsilon is None:
            e2 = _optimal_value_epsilon(eps, extended, padding)
        else:
            e2 = check_epsilon(value_epsilon)
            if e2 > eps:
                raise InvalidParameterError(
                    "value_epsilon", value_epsilon, f"a number in (0, epsilon={eps!r}]"
                )
        tb = largest_threshold(
            lambda t: ratio_within_exp(t, PROB_ONE - t, e2),
            math.floor(PROB_ONE / (1.0 + math.exp(-e2))),
            _HALF + 1,
            PROB_ONE - 1,
        )
        if tb == 0:  # eps2 too small for any b > 1/2 a multiple of 2^-32 can express
            raise InvalidParameterError(
                "value_epsilon" if value_epsilon is not None else "epsilon",
                value_epsilon if value_epsilon is not None else epsilon,
                "a value epsilon large enough for a value probability above 1/2 (about 1e-9 or more)",
            )
        m = extended - 1

        def joint_within(t: int) -> bool:
            return ratio_within_exp(2 * t * tb * m, (PROB_ONE - t) * PROB_ONE, eps)

        e1 = eps - math.log(2.0 * tb / PROB_ONE)  # may be negative: then no a > 1/d' fits
        ta = largest_threshold(
            joint_within,
            math.floor(PROB_ONE / (1.0 + m * math.exp(min(-e1, 700.0)))),
            PROB_ONE // extended + 1,
            PROB_ONE - 1,
        )
        if ta == 0:
            raise InvalidParameterError(
                "value_epsilon" if value_epsilon is not None else "epsilon",
                value_epsilon if value_epsilon is not None else epsilon,
                f"a split leaving eps1 = epsilon - ln(2b) > 0 (a key probability above 1/d' = 1/{extended})",
            )
        params = cls(
            domain=dom,
            padding=padding,
            key_probability=ta / PROB_ONE,
            value_probability=tb / PROB_ONE,
            lo=lo,
            hi=hi,
        )
        report_quantization(eps, params.epsilon)
        return params

    @classmethod
    def _make(cls, *, epsilon: float | None, domain: object, fields: dict[str, object]) -> PCKVParams:
        """``make_params("pckv", ...)``: ``padding`` (required), ``lo``/``hi``, and either epsilon (with
        an optional ``value_epsilon``) or ``key_probability`` and ``value_probability``."""
        dom = require_domain(domain, cls.name)
        allowed = ("padding", "lo", "hi", "value_epsilon", "key_probability", "value_probability")
        if "padding" not in fields:
            raise InvalidParameterError("padding", None, "the padding length l >= 1 (--param padding=L)")
        padding = int_field(
            "padding",
            take_field(fields, "padding", int, cls.name),
            1,
            min(MAX_PADDING, MAX_DOMAIN_SIZE - dom.size),
        )
        lo = float(take_field(fields, "lo", float, cls.name)) if "lo" in fields else -1.0  # type: ignore[arg-type]
        hi = float(take_field(fields, "hi", float, cls.name)) if "hi" in fields else 1.0  # type: ignore[arg-type]
        probs = {
            k: take_field(fields, k, float, cls.name)
            for k in ("key_probability", "value_probability")
            if k in fields
        }
        value_eps = (
            take_field(fields, "value_epsilon", float, cls.name) if "value_epsilon" in fields else None
        )
        no_more_fields(fields, cls.name, allowed)
        if not lo < hi:
            raise InvalidParameterError("hi", hi, f"a number greater than lo={lo!r}")
        if probs:
            if epsilon is not None or value_eps is not None or len(probs) != 2:
                raise InvalidParameterError(
                    "key_probability",
                    probs.get("key_probability"),
                    "key_probability and value_probability together, without epsilon or value_epsilon",
                )
            return cls(domain=dom, padding=padding, lo=lo, hi=hi, **probs)  # type: ignore[arg-type]
        if epsilon is None:
            raise InvalidParameterError("epsilon", None, "an epsilon > 0 for pckv")
        return cls.from_epsilon(dom, epsilon, padding=padding, lo=lo, hi=hi, value_epsilon=value_eps)  # type: ignore[arg-type]


class PCKVEncoder:
    """Encodes one user's key-value mapping per report (module docstring).

    Raises:
        InvalidParameterError: ``params`` is not a :class:`PCKVParams`.
    """

    __slots__ = ("_d", "_m", "_ta", "_tb", "params")

    def __init__(self, params: PCKVParams) -> None:
        if not isinstance(params, PCKVParams):
            raise InvalidParameterError("params", type(params).__name__, "a PCKVParams")
        self.params = params
        self._d = params.domain.size
        self._m = params.extended_size - 1
        self._ta = params.key_threshold
        self._tb = params.value_threshold

    def __repr__(self) -> str:
        return f"PCKVEncoder(params={self.params!r})"

    def pairs_of(self, mapping: Mapping[Any, Any]) -> list[tuple[int, int]]:
        """Validate a mapping: (key index, threshold of P(v* = +1)) of its 1 to l pairs, in order.

        Raises:
            DomainError: not a mapping, empty or more than l pairs, a key outside the domain, or a value
                that is not a finite number in [lo, hi].
        """
        p = self.params
        if not isinstance(mapping, Mapping):
            raise DomainError(
                "values", type(mapping).__name__, f"a mapping of 1 to {p.padding} keys to values"
            )
        if not 1 <= len(mapping) <= p.padding:
            raise DomainError(
                "values", f"<{len(mapping)} pairs>", f"a mapping of 1 to padding={p.padding} pairs"
            )
        out: list[tuple[int, int]] = []
        span = p.hi - p.lo
        for key, x in mapping.items():
            k = p.domain.index(key, "key")
            if (
                isinstance(x, bool)
                or not isinstance(x, int | float)
                or not math.isfinite(x)
                or not p.lo <= x <= p.hi
            ):
                raise DomainError(f"value of {key!r}", x, f"a finite number in [lo, hi] = [{p.lo}, {p.hi}]")
            out.append((k, round((x - p.lo) / span * PROB_ONE)))
        return out

    def encode(self, mapping: Mapping[Any, Any]) -> int:
        """Randomize one user's mapping with the OS CSPRNG: the report index 2 j + [s = +1].

        Raises:
            DomainError: see :meth:`pairs_of`.
        """
        pairs = self.pairs_of(mapping)
        r = int.from_bytes(_rnd._source(16), "little")
        w0, w1, w2, w3 = r & _U32, (r >> 32) & _U32, (r >> 64) & _U32, r >> 96
        slot = _rnd.uniform_below(self.params.padding, w0)
        key, tv = pairs[slot] if slot < len(pairs) else (self._d + slot, _HALF)
        positive = w1 < tv  # stochastic rounding: v* = +1 w.p. (1 + v) / 2
        if w2 < self._ta:
            return 2 * key + (positive if w3 < self._tb else not positive)
        extra = int.from_bytes(_rnd._source(4), "little")
        other = _rnd.uniform_below(self._m, w3)
        return 2 * (other + (other >= key)) + (extra & 1)

    def encode_batch(self, keys: ArrayLike, values: ArrayLike, rng: np.random.Generator) -> NDArray[np.int64]:
        """Randomize n users' mappings with a seeded numpy Generator (simulation only), vectorised.

        Args:
            keys: integer matrix (n, l): row r holds user r's key indices, -1 in unused slots (anywhere).
            values: float matrix (n, l): the values of those keys in [lo, hi] (ignored where keys is -1).
            rng: an explicit :class:`numpy.random.Generator`.

        Raises:
            DomainError: bad shapes, a key outside [-1, d), a repeated key, an empty row, or a value outside
                [lo, hi].
            InvalidParameterError: ``rng`` is not a numpy Generator.
        """
        import numpy as np

        if not isinstance(rng, np.random.Generator):
            raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
        p = self.params
        k_arr, v_arr = np.asarray(keys), np.asarray(values, dtype=np.float64)
        n_l = (k_arr.shape[0] if k_arr.ndim == 2 else -1, p.padding)
        if k_arr.ndim != 2 or k_arr.shape[1] != p.padding or (k_arr.size and k_arr.dtype.kind not in "iu"):
            raise DomainError(
                "keys",
                f"<array of shape {k_arr.shape}, dtype {k_arr.dtype}>",
                f"an integer matrix (n, {p.padding})",
            )
        if v_arr.shape != k_arr.shape:
            raise DomainError(
                "values", f"<array of shape {v_arr.shape}>", f"a float matrix of the keys' shape {n_l}"
            )
        n = k_arr.shape[0]
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        k_arr = k_arr.astype(np.int64, copy=False)
        held = k_arr >= 0
        if int(k_arr.min()) < -1 or int(k_arr.max()) >= self._d:
            bad = int(k_arr[(k_arr < -1) | (k_arr >= self._d)][0])
            raise DomainError("keys", bad, f"key indices in [0, {self._d - 1}], or -1 for an empty slot")
        if not held.any(axis=1).all():
            raise DomainError(
                f"keys[{int(np.argmin(held.any(axis=1)))}]", "<no key>", "at least one key per user"
            )
        v_held = np.where(held, v_arr, p.lo)
        if not (np.isfinite(v_held).all() and (v_held >= p.lo).all() and (v_held <= p.hi).all()):
            bad_v = v_held[~(np.isfinite(v_held) & (v_held >= p.lo) & (v_held <= p.hi))][0]
            raise DomainError("values", float(bad_v), f"finite numbers in [lo, hi] = [{p.lo}, {p.hi}]")
        if p.padding > 1:
            srt = np.sort(k_arr, axis=1)
            dup = (srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)
            if dup.any():
                row = int(np.argmax(dup.any(axis=1)))
                raise DomainError(f"keys[{row}]", k_arr[row].tolist(), "distinct keys in each row")
        rows = np.arange(n)
        slot = rng.integers(0, p.padding, size=n, dtype=np.int64)
        key: NDArray[np.int64] = k_arr[rows, slot]
        # Threshold of P(v* = +1), as the device computes it (dummy and empty slots: 1/2).
        tv = np.where(key >= 0, np.rint((v_held[rows, slot] - p.lo) / (p.hi - p.lo) * PROB_ONE), _HALF)
        key = np.where(key >= 0, key, self._d + slot)
        u = rng.integers(0, PROB_ONE, size=(3, n), dtype=np.uint64)
        positive = u[0] < tv
        kept = u[1] < self._ta
        flip = u[2] >= self._tb
        other = np.asarray(rng.integers(0, self._m, size=n, dtype=np.int64))
        other += other >= key
        random_sign = rng.integers(0, 2, size=n, dtype=np.int64)
        return np.where(kept, 2 * key + (positive ^ flip), 2 * other + random_sign).astype(np.int64)


def _input_mapping(params: PCKVParams, index: int) -> dict[Any, float]:
    """The one-pair mapping a simulated categorical user with item ``index`` holds: (key, hi) for an even
    index, (key, lo) for an odd one (both signs occur, so conformance checks see the value channel)."""
    return {params.domain.value(index): params.hi if index % 2 == 0 else params.lo}


class PCKVSpec(MechanismSpec[PCKVParams]):
    """PCKV-GRR for every layer (:mod:`ldp_client.spec`).

    Wire: ``Campaign.pckv`` (``PckvParams``), ``ReportBatch.pckv_indices`` (little-endian uint32, each
    < 2 d'), ``Report.pckv_index``. Journal row: the u32 index. Accumulator: ``counts`` of size 2 d'
    (index 2 j + [s = +1]). Items: the d keys; a report supports key k when its key is k (either sign), with
    p* = q + (a - q) / l and q* = q, so the frequencies are the pure-oracle estimator's; the means come from
    :meth:`key_value_counts` (``ldp_aggregator.key_values``). A simulated categorical user holding item i
    holds the one pair of :func:`_input_mapping`; ``ldp-sim run --mechanism pckv`` with a key-value
    population (``simulations.key_values``) encodes real mappings through :class:`PCKVEncoder`.
    """

    name: ClassVar[str] = PCKVParams.name
    params_type: ClassVar[type[Any]] = PCKVParams
    kind: ClassVar[Kind] = Kind.SUPPORT
    wire: ClassVar[WireNames] = WireNames(campaign="pckv", batch="pckv_indices", report="pckv_index")
    takes_domain: ClassVar[bool] = True

    def make(
        self, *, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]
    ) -> PCKVParams:
        return PCKVParams._make(epsilon=epsilon, domain=domain, fields=dict(fields))

    def make_args(self, params: PCKVParams) -> MakeArgs:
        dom = params.domain
        return MakeArgs(
            domain=dom.labels if dom.labels is not None else dom.size,
            fields={
                "padding": params.padding,
                "key_probability": params.key_probability,
                "value_probability": params.value_probability,
                "lo": params.lo,
                "hi": params.hi,
            },
        )

    def params_to_proto(self, params: PCKVParams) -> campaign_pb2.PckvParams:
        return campaign_pb2.PckvParams(
            domain=domain_to_proto(params.domain),
            padding=params.padding,
            key_probability=params.key_probability,
            value_probability=params.value_probability,
            lo=params.lo,
            hi=params.hi,
        )

    def params_from_proto(self, msg: campaign_pb2.PckvParams) -> PCKVParams:
        return PCKVParams(
            domain=domain_from_proto(msg.domain),
            padding=msg.padding,
            key_probability=msg.key_probability,
            value_probability=msg.value_probability,
            lo=msg.lo,
            hi=msg.hi,
        )

    def encoder(
        self, params: PCKVParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        return PCKVEncoder(params).encode

    # ------------------------------------------------------------------------------------ codec

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: PCKVParams, columns: Any) -> None:
        msg.count, raw = encode_index_column(self.wire.batch, columns, 2 * params.extended_size)
        msg.pckv_indices = raw

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: PCKVParams, n: int) -> Any:
        return decode_index_column(msg.pckv_indices, n, 2 * params.extended_size, self.wire.batch)

    def report_to_proto(self, msg: reports_pb2.Report, params: PCKVParams, output: Any) -> None:
        msg.pckv_index = index_value("report", output, 2 * params.extended_size)

    def report_from_proto(self, msg: reports_pb2.Report, params: PCKVParams) -> Any:
        import numpy as np

        bound = 2 * params.extended_size
        if msg.pckv_index >= bound:
            raise InvalidReportError(self.wire.report, msg.pckv_index, f"an index in [0, {bound - 1}]")
        return np.array([msg.pckv_index], dtype=np.int64)

    def batch_from_reports(self, params: PCKVParams, reports: Sequence[Any]) -> Any:
        import numpy as np

        bound = 2 * params.extended_size
        return np.array(
            [index_value(f"reports[{i}]", r, bound) for i, r in enumerate(reports)], dtype=np.int64
        )

    def row_fields(self, params: PCKVParams) -> tuple[RowField, ...]:
        return (RowField((self.wire.batch,), 4),)

    def row_packer(self, params: PCKVParams) -> Callable[[Any], bytes]:
        return pack_u32_row

    def row_unpacker(self, params: PCKVParams) -> Callable[[bytes], Any]:
        return unpack_u32_row

    # ------------------------------------------------------------------------------- simulation

    def encode_batch(
        self,
        params: PCKVParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        import numpy as np

        keys = np.full((values.shape[0], params.padding), -1, dtype=np.int64)
        keys[:, 0] = values
        vals = np.zeros(keys.shape, dtype=np.float64)
        vals[:, 0] = np.where(values % 2 == 0, params.hi, params.lo)
        return PCKVEncoder(params).encode_batch(keys, vals, rng)

    # ----------------------------------------------------------------------------------- server

    def layout(self, params: PCKVParams) -> Layout:
        return Layout.counts(2 * params.extended_size)

    def layout_batch(self, params: PCKVParams, columns: Any) -> Any:
        import numpy as np

        arr = np.asarray(columns)
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
            raise InvalidReportError("reports", str(arr.dtype), "an integer array of pckv report indices")
        return arr

    def items(self, params: PCKVParams) -> tuple[str, ...]:
        dom = params.domain
        return tuple(dom.label(i) for i in range(dom.size))

    def input_value(self, params: PCKVParams, index: int) -> Any:
        return _input_mapping(params, index)

    def items_per_user(self, params: PCKVParams) -> tuple[int, int]:
        return (1, params.padding)

    def support_rates(self, params: PCKVParams) -> tuple[float, float]:
        q = params.q
        return q + (params.a - q) / params.padding, q

    def support(self, params: PCKVParams, acc: CountsView, candidates: Sequence[str] = ()) -> Support:
        import numpy as np

        counts = np.asarray(acc.counts)[: 2 * params.domain.size]
        p_star, q_star = self.support_rates(params)
        return Support(
            labels=self.items(params),
            counts=counts[0::2] + counts[1::2],
            n=acc.n,
            p_star=p_star,
            q_star=q_star,
        )

    def key_value_counts(self, params: PCKVParams, acc: Any) -> KeyValueCounts | None:
        import numpy as np

        counts = np.asarray(acc.counts, dtype=np.float64)[: 2 * params.domain.size]  # exact below 2^53
        return KeyValueCounts(
            labels=self.items(params),
            n=int(acc.n),
            positive=counts[1::2],
            negative=counts[0::2],
            padding=params.padding,
            a=params.a,
            b=params.b,
            q=params.q,
            lo=params.lo,
            hi=params.hi,
        )

    # -------------------------------------------------------------------------------- conformance

    def examples(self) -> tuple[PCKVParams, ...]:
        # l = 1 and eps1 + ln(2b) >= eps2: the one-pair inputs then attain the reported epsilon.
        return (
            PCKVParams.from_epsilon(3, 1.0, padding=1, value_epsilon=0.8),
            PCKVParams.from_epsilon(("a", "b", "c", "d"), 2.0, padding=1, lo=1.0, hi=5.0, value_epsilon=1.5),
            PCKVParams(domain=Domain.of(2), padding=1, key_probability=0.5, value_probability=0.75),
        )

    def largest(self) -> tuple[PCKVParams, ...]:
        # The most keys with the longest padding: d + l = 2^24 extended keys, 2^25 counters.
        return (
            PCKVParams(
                domain=Domain.of(MAX_DOMAIN_SIZE - MAX_PADDING),
                padding=MAX_PADDING,
                key_probability=0.5,
                value_probability=0.75,
            ),
        )

    def exact_outputs(self, params: PCKVParams, value: Any) -> Mapping[Hashable, Fraction]:
        pairs = PCKVEncoder(params).pairs_of(value)
        a = Fraction(params.key_threshold, PROB_ONE)
        b = Fraction(params.value_threshold, PROB_ONE)
        m = params.extended_size - 1
        other = (1 - a) / (2 * m)
        weight = Fraction(1, params.padding)
        out: dict[Hashable, Fraction] = {}
        for slot in range(params.padding):
            key, tv = pairs[slot] if slot < len(pairs) else (params.domain.size + slot, _HALF)
            t = Fraction(tv, PROB_ONE)
            for j in range(m + 1):
                if j == key:
                    plus, minus = a * (t * b + (1 - t) * (1 - b)), a * (t * (1 - b) + (1 - t) * b)
                else:
                    plus = minus = other
                out[2 * j + 1] = out.get(2 * j + 1, Fraction(0)) + weight * plus
                out[2 * j] = out.get(2 * j, Fraction(0)) + weight * minus
        return out


SPEC = PCKVSpec()
"""PCKV-GRR key-value collection, as :mod:`ldp_client.registry` lists it."""
