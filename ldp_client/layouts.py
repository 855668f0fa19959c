"""The contracts between a mechanism and the aggregator: which generic accumulator holds a campaign's sums
(:class:`Layout`), how the aggregator's accumulators are seen by a mechanism's hooks (the view protocols),
and what the hooks hand back to the shared estimators (:class:`Support` for the pure-oracle estimator,
:class:`MeanDesign` and :class:`Moments` for means, a :class:`SumSampler` for exact simulation).

:mod:`ldp_client.spec` builds the mechanism specification on these; they live apart so that the spec module
is the mechanism's interface alone. The Support contract's formulas are in :mod:`ldp_client.spec`'s module
docstring. Importing this module does not import numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

__all__ = [
    "LAYOUT_SUMS",
    "BitsView",
    "CountsView",
    "HaarLevels",
    "KeyValueCounts",
    "Layout",
    "LayoutKind",
    "MarginalTables",
    "MeanDesign",
    "Moments",
    "MomentsView",
    "PairedView",
    "RangeLevels",
    "Rates",
    "SumSampler",
    "Support",
    "SupportView",
]


LayoutKind: TypeAlias = Literal["counts", "bits", "support", "moments", "paired"]

# Bytes a serialized accumulator adds beyond its 64-bit counters (headers and checksum), in the size check.
_ACCUMULATOR_OVERHEAD = 64


@dataclass(frozen=True, slots=True)
class Layout:
    """The accumulator a campaign needs: one of the aggregator's generic layouts, and its shape.

    Layouts and their standard input (what :meth:`MechanismSpec.layout_batch` returns for a batch):

    ======== ============ ===============================================================================
    kind     shape        standard input of one batch
    ======== ============ ===============================================================================
    counts   (size,)      a 1-D integer (or bool) array of reported value indices in [0, size): the
                          accumulator counts the reports of each value
    bits     (m, k)       ``(cohorts, bits)``: cohorts an integer array (n,) in [0, m), or None when m = 1;
                          bits uint8 (n, ceil(k/8)) packed in little bit order, zero padding
    support  (size,)      ``(n, support)``: the number of reports and, per item, how many support it
    moments  (A, C, s...) ``(codes, attributes, users)``: r integer codes in [0, C) (1-D), the attribute in
                          [0, A) each code is about (1-D, same shape) or None when A = 1, and how many
                          users sent the r reports (None: one report per user); codes s... (sorted) are
                          counted apart, the others summed exactly (count, sum c, sum c^2 per attribute)
    paired   (rows, cols) ``(first input, second input, joint cells or None)``: each side's standard input
             or ()        for its part (``parts``: the two sides' layouts), and when the accumulator keeps
                          the joint table of report patterns (shape (rows, cols); () when it does not) the
                          cell ``row * cols + col`` of each report
    ======== ============ ===============================================================================

    Attributes:
        kind: the layout; the aggregator creates and feeds accumulators through a table keyed by it.
        shape: as in the table.
        nbytes: the serialized size of the empty accumulator, for the service's max_accumulator_bytes check
            (computed without allocating anything); for a layout that ``grows``, a bound on its size.
        grows: the byte form grows with the sums it holds (``moments``: exact integers of any size), so
            ``nbytes`` bounds it at any realistic number of reports instead of being its empty size.
        parts: the layouts of the accumulators this one is made of (a composite layout: ``paired`` holds
            one accumulator per side); empty for the others.
    """

    kind: LayoutKind
    shape: tuple[int, ...]
    nbytes: int
    grows: bool = False
    parts: tuple[Layout, ...] = ()

    @classmethod
    def counts(cls, size: int) -> Layout:
        """Counts of ``size`` reported values (8 bytes per counter)."""
        return cls("counts", (size,), 8 * size + _ACCUMULATOR_OVERHEAD)

    @classmethod
    def bits(cls, m: int, k: int) -> Layout:
        """Per cohort (m of them) the number of reports and the ones of each of k bits."""
        return cls("bits", (m, k), 8 * (m * k + m) + _ACCUMULATOR_OVERHEAD)

    @classmethod
    def support(cls, size: int) -> Layout:
        """The number of reports and, for each of ``size`` items, the reports that support it."""
        return cls("support", (size,), 8 * size + _ACCUMULATOR_OVERHEAD)

    @classmethod
    def moments(cls, attributes: int, num_codes: int, special_codes: Sequence[int] = ()) -> Layout:
        """Exact sums of integer codes per attribute (``attributes`` of them, codes in [0, num_codes),
        ``special_codes`` counted apart). Its integers grow without bound: ``nbytes`` allows 64 bytes for
        each of them (3 sums and one count per special code, per attribute) and 256 for the headers."""
        specials = tuple(special_codes)
        nbytes = 256 + 64 * attributes * (3 + len(specials))
        return cls("moments", (attributes, num_codes, *specials), nbytes, grows=True)

    @classmethod
    def paired(cls, first: Layout, second: Layout, joint: tuple[int, int] | None) -> Layout:
        """Two sides' accumulators and, when ``joint`` is a shape, the counts of their joint report patterns
        (8 bytes per cell)."""
        cells = 0 if joint is None else joint[0] * joint[1]
        nbytes = first.nbytes + second.nbytes + 8 * cells + _ACCUMULATOR_OVERHEAD
        return cls("paired", () if joint is None else joint, nbytes, parts=(first, second))


LAYOUT_SUMS: dict[LayoutKind, tuple[str, ...]] = {
    "counts": ("counts",),
    "bits": ("cohort_reports", "ones"),
    "support": ("reports", "support"),
    "moments": ("users", "counts", "s1", "s2", "special_counts"),
    "paired": ("first", "second", "joint"),
}
"""The sums each layout's accumulator holds: the attributes its view protocol shows (:class:`CountsView`,
:class:`BitsView`, :class:`SupportView`, :class:`MomentsView`, :class:`PairedView`), in the order a
:class:`SumSampler` returns them (one field: the array itself; several: a tuple). A composite layout's first
sums are its parts' accumulators (``Layout.parts``, in order); ``paired``'s ``joint`` is None when the
accumulator keeps no joint table."""


Rates: TypeAlias = "float | Sequence[float] | NDArray[np.float64]"
"""A support rate: one value for every item, or one per item."""


@dataclass(frozen=True, kw_only=True, eq=False)
class Support:
    """Per-item support counts and rates: all the pure-oracle estimator needs (module docstring).

    Attributes:
        labels: the items, in order.
        counts: C_v, the number of reports supporting each item (1-D, one per label; floats are allowed for
            exact expected-count checks).
        n: the number of reports.
        p_star: P(a report supports v | its user holds v): a scalar, or one per item.
        q_star: P(a report supports v | its user does not hold v): a scalar, or one per item; it differs
            from p_star for every item.
        epsilon_inf: the longitudinal bound reported with the estimates (None: the mechanism has none).
        extra_variance: variance of count_hat_v beyond the contract's formula, on the count scale (a scalar,
            or one per item; 0 by default): what the mechanism's own model adds, e.g. a sketch's hash
            collisions. The estimator adds it to the variance and widens the interval by it.
        estimated: the counts are already unbiased count estimates (any real numbers; a mechanism whose
            items are linear combinations of several levels, e.g. haar's leaves), ``extra_variance`` their
            whole variance, with p* = 1 and q* = 0: the estimator reports them with a normal interval.
    """

    labels: tuple[str, ...]
    counts: Any
    n: int
    p_star: Rates
    q_star: Rates
    epsilon_inf: float | None = None
    extra_variance: Rates = 0.0
    estimated: bool = False


@dataclass(frozen=True)
class RangeLevels:
    """A hierarchy of frequency-oracle levels over an ordered domain, for range queries (issue 18).

    Level l (1..h) has B^l nodes; node j covers the values [j B^(h-l), (j+1) B^(h-l)) of the padded domain
    of B^h >= D values. Each report belongs to one level; ``counts[l-1][j]`` of the ``reports[l-1]``
    reports of level l support node j, with P(support | the user's value is in the node) =
    ``p_star[l-1]`` and ``q_star[l-1]`` otherwise (each level's oracle may differ).
    ``ldp_aggregator.ranges`` estimates ranges, quantiles and the CDF from it.

    Attributes:
        labels: the D values, in order.
        branching: B.
        counts: per level, the support count of each node (1-D, B^l each).
        reports: per level, the number of its reports n_l.
        n: all reports (sum of ``reports``).
        p_star: each level's oracle's p*.
        q_star: each level's oracle's q*.
    """

    labels: tuple[str, ...]
    branching: int
    counts: tuple[Any, ...]
    reports: tuple[int, ...]
    n: int
    p_star: tuple[float, ...]
    q_star: tuple[float, ...]


@dataclass(frozen=True)
class HaarLevels:
    """Haar-coefficient levels over an ordered domain, for range queries (issue 18; ``haar``).

    The domain is padded to 2^h leaves; level l (1..h) has m_l = 2^(l-1) nodes, node j covering the leaves
    [j 2^(h-l+1), (j+1) 2^(h-l+1)). Each report belongs to one level and names a Hadamard row r of it and a
    bit; ``rows[l-1][r]`` reports of level l named row r and ``plus[l-1][r]`` of them reported +1. A report's
    bit (+-1) has mean ``bias`` times the truth s_l(x) H[r, node_l(x)] (``ldp_client.mechanisms.haar``).
    ``ldp_aggregator.haar_ranges`` estimates ranges, quantiles and the CDF from it.

    Attributes:
        labels: the D values, in order.
        rows: per level, the reports of each Hadamard row (1-D, 2^(l-1) each).
        plus: per level, the +1 reports of each row.
        n: all reports.
        bias: a, E[bit | truth t] = a t.
    """

    labels: tuple[str, ...]
    rows: tuple[Any, ...]
    plus: tuple[Any, ...]
    n: int
    bias: float


@dataclass(frozen=True)
class KeyValueCounts:
    """The report counts of a key-value campaign (issue 18; ``pckv``), per key of the declared domain.

    Each report names one key of the d + l extended keys and a sign; ``positive[k]`` / ``negative[k]`` of
    the ``n`` reports named key k with +1 / -1. A user's sampled pair (probability 1/``padding`` per held
    pair) keeps its key w.p. ``a`` (then its discretised value w.p. ``b``); any other key is reported w.p.
    ``q`` with a uniform sign. Values were declared in [``lo``, ``hi``] and mapped to [-1, 1].
    ``ldp_aggregator.key_values`` estimates each key's frequency and mean value from it.
    """

    labels: tuple[str, ...]
    n: int
    positive: Any
    negative: Any
    padding: int
    a: float
    b: float
    q: float
    lo: float
    hi: float


@dataclass(frozen=True)
class MarginalTables:
    """Frequency-oracle groups over marginals of categorical attributes, for marginal queries (issue 18;
    ``calm``).

    Marginal i (0-based) is the attribute set ``marginals[i]`` (sorted indices into ``attributes``); its
    cells are the combinations of its attributes' labels, row-major (the last attribute fastest). Each report
    belongs to one group; ``counts[i][c]`` of the ``reports[i]`` reports of group i support cell c, with
    P(support | the user's record is in c) = ``p_star[i]`` and ``q_star[i]`` otherwise; ``grr[i]``: the
    group reports one cell (GRR: support counts are multinomial), else local hashing (uncorrelated cells).
    ``ldp_aggregator.marginals`` estimates, makes consistent and answers marginals from it.
    """

    attributes: tuple[str, ...]
    labels: tuple[tuple[str, ...], ...]
    marginals: tuple[tuple[int, ...], ...]
    counts: tuple[Any, ...]
    reports: tuple[int, ...]
    n: int
    p_star: tuple[float, ...]
    q_star: tuple[float, ...]
    grr: tuple[bool, ...]


class CountsView(Protocol):
    """What a ``counts`` layout accumulator shows a spec: ``counts[v]`` reports of value v."""

    @property
    def counts(self) -> NDArray[Any]: ...

    @property
    def n(self) -> int: ...


class BitsView(Protocol):
    """What a ``bits`` accumulator shows: per cohort j, ``cohort_reports[j]`` and ``ones[j, i]``."""

    @property
    def cohort_reports(self) -> NDArray[Any]: ...

    @property
    def ones(self) -> NDArray[Any]: ...

    @property
    def n(self) -> int: ...


class SupportView(Protocol):
    """What a ``support`` accumulator shows: ``reports`` reports, ``support[v]`` of which support v."""

    @property
    def reports(self) -> int: ...

    @property
    def support(self) -> NDArray[Any]: ...

    @property
    def n(self) -> int: ...


class MomentsView(Protocol):
    """What a ``moments`` accumulator shows: ``users`` users, and per attribute a: ``counts[a]`` regular
    reports, ``s1[a]`` and ``s2[a]`` the exact sums of their codes and squared codes, and
    ``special_counts[a][j]`` the reports of the j-th special code."""

    @property
    def users(self) -> int: ...

    @property
    def counts(self) -> Sequence[int]: ...

    @property
    def s1(self) -> Sequence[int]: ...

    @property
    def s2(self) -> Sequence[int]: ...

    @property
    def special_counts(self) -> Sequence[Sequence[int]]: ...

    @property
    def n(self) -> int: ...


class PairedView(Protocol):
    """What a ``paired`` accumulator shows: each side's accumulator and the joint pattern counts (or None)."""

    @property
    def first(self) -> Any: ...

    @property
    def second(self) -> Any: ...

    @property
    def joint(self) -> NDArray[Any] | None: ...

    @property
    def n(self) -> int: ...


@dataclass(frozen=True, kw_only=True, eq=False)
class MeanDesign:
    """What the means estimator and the simulator need of a Kind.MEAN campaign's parameters.

    A user holds one real value per attribute; a report carries unbiased estimates of some of them (a user
    reports k of its D attributes: ``scale`` = D/k, and 1 in one dimension). The estimate of a user's
    attribute is z = scale * x_hat when the report carries it and 0 otherwise, unbiased for the value
    (Wang et al., ICDE 2019).

    Attributes:
        labels: one per attribute ("value" in one dimension, "0".."D-1").
        ranges: the declared (lo, hi) of each attribute.
        scale: D/k, exactly.
        variance_s: Var(s_hat | s) of one reported attribute at positions s = (x - lo)/(hi - lo) in [0, 1]
            (numpy in, numpy out; position units: times (hi - lo)^2 for the value's).
        max_variance_s: a function returning its largest value over s, which bounds one user's variance
            when n < 2 (a function: the estimator needs it that rarely, and it costs a little to compute).
    """

    labels: tuple[str, ...]
    ranges: tuple[tuple[float, float], ...]
    scale: Fraction
    variance_s: Callable[[ArrayLike], NDArray[np.float64]]
    max_variance_s: Callable[[], float]


@dataclass(frozen=True, kw_only=True, eq=False)
class Moments:
    """Exact sums of the per-report estimates x_hat of each attribute: all the means estimator needs.

    Attributes:
        design: the campaign's :class:`MeanDesign`.
        n: users who reported.
        reports: per attribute, the reports that carried it.
        sum_x: per attribute, the exact sum of x_hat over those reports.
        sum_x2: per attribute, the exact sum of x_hat^2 over them.
    """

    design: MeanDesign
    n: int
    reports: tuple[int, ...]
    sum_x: tuple[Fraction, ...]
    sum_x2: tuple[Fraction, ...]


class SumSampler(Protocol):
    """Exact sampling of a batch's sums for ``true_counts[v]`` users holding each value v (simulation).

    Returns the sums in the form of the spec's :class:`Layout` (counts: the count of each reported value;
    bits: ``(cohort_reports, ones)``; support: ``(n, support)``; moments: ``(shape, users, counts, s1, s2,
    special_counts)``, the layout's shape first since sums of codes do not tell their range), drawn with the
    seeded ``rng`` so that they have exactly the law of the sums of one report per user.
    """

    def __call__(
        self,
        true_counts: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any: ...
