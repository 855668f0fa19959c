"""The mechanism specification: everything the client, the aggregator and the simulator need of a mechanism.

A mechanism is one module under ``ldp_client/mechanisms/`` that defines its parameter class, its encoder and
``SPEC``, an instance of a :class:`MechanismSpec` subclass. :mod:`ldp_client.registry` lists the specs; every
layer looks a mechanism up there (``spec_for(params)``, ``spec_named(name)``, ``spec_for_member(member)``)
and calls the spec's methods. Layers branch only on a few :class:`Kind` values (how the server estimates)
and :class:`Layout` kinds (which accumulator holds the sums), never on a mechanism's name or class.

The spec lives in the client package (the bottom of ``simulations -> ldp_aggregator -> ldp_client``), so
its server-side hooks speak in terms the client owns: a :class:`Layout` names one of the aggregator's few
generic accumulators and its shape, :meth:`MechanismSpec.layout_batch` turns decoded batch columns into
that accumulator's standard input, and :meth:`MechanismSpec.support` reads an accumulator through the small
view protocols below (:class:`CountsView`, :class:`BitsView`, :class:`SupportView`) and returns a
:class:`Support`, which the one pure-oracle estimator of ``ldp_aggregator.estimators`` turns into estimates.

**The Support contract** (Wang, Blocki, Li, Jha, "Locally Differentially Private Protocols for Frequency
Estimation", USENIX Security 2017, §4). A report *supports* item v with probability p* if its user holds v
and q* otherwise (``p_star`` / ``q_star``; here they mean exactly this and nothing else). With C_v of the n
reports supporting v and c_v users holding it::

    count_hat_v = (C_v - n q*) / (p* - q*)                                         (unbiased for c_v)
    Var[count_hat_v] = (n q*(1 - q*) + c_v (p* - q*)(1 - p* - q*)) / (p* - q*)^2

The rates may differ between items (binary RR: "yes" has p* = P(yes|yes), q* = P(yes|no); "no" has
p* = 1 - P(yes|no), q* = 1 - P(yes|yes)), so they are a scalar or one value per item.

Importing this module does not import numpy (the device's reporter imports it through the registry); the
simulation and server methods of a spec import numpy when called.
"""

from __future__ import annotations

import abc
import enum
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, TypeAlias, TypeVar

from ldp_client._oracle_math import oracle_variance
from ldp_client.codecs import RowField

if TYPE_CHECKING:
    import numpy as np
    from google.protobuf.message import Message
    from numpy.typing import ArrayLike, NDArray

    from ldp_client._proto.ldp.v1 import reports_pb2
    from ldp_client.domain import DomainLike
    from ldp_client.secret import ClientSecret

__all__ = [
    "LAYOUT_SUMS",
    "BitsView",
    "CountsView",
    "Kind",
    "Layout",
    "LayoutKind",
    "MakeArgs",
    "MeanDesign",
    "MechanismSpec",
    "Moments",
    "MomentsView",
    "PairedView",
    "ParamsLike",
    "Rates",
    "RowField",
    "SecretSource",
    "SumSampler",
    "Support",
    "SupportView",
    "WireNames",
]


class Kind(enum.Enum):
    """How the server estimates a mechanism's campaigns; the aggregator keys a table by this."""

    SUPPORT = "support"
    """Per-item support counts and (p*, q*) (:class:`Support`): rr, grr, basic/boolean RAPPOR, the
    frequency oracles (oue, sue, olh, blh, ss, hr, set-valued)."""
    RAPPOR = "rappor"
    """String RAPPOR: per-cohort Bloom-bit counts; candidate strings by regression and decoding."""
    MEAN = "mean"
    """Numeric mechanisms: means and sums."""
    PAIRED = "paired"
    """Two variables per report: association."""
    DISCOVERY = "discovery"
    """Values the server finds itself (heavy hitters over an unknown domain), level by level over
    candidate prefixes: every level's reports estimate its candidates through a :class:`Support`."""


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


@dataclass(frozen=True, slots=True)
class WireNames:
    """The members of the ``ldp.v1`` oneofs that carry a mechanism (fixed by the protos).

    Attributes:
        campaign: ``Campaign.mechanism`` member, e.g. ``"grr"``.
        batch: ``ReportBatch.payload`` member, e.g. ``"grr_indices"``.
        report: ``Report.value`` member, e.g. ``"grr_index"``.
    """

    campaign: str
    batch: str
    report: str


@dataclass(frozen=True, kw_only=True, slots=True)
class MakeArgs:
    """Parameters by name, as ``make_params`` (and ``--epsilon``/``--domain``/``--param``) take them."""

    epsilon: float | None = None
    domain: int | tuple[str, ...] | None = None
    fields: Mapping[str, object] = field(default_factory=dict)


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
    """

    labels: tuple[str, ...]
    counts: Any
    n: int
    p_star: Rates
    q_star: Rates
    epsilon_inf: float | None = None


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


SecretSource: TypeAlias = "ClientSecret | Callable[[], ClientSecret]"
"""The device's client secret, or a function returning it (called only by mechanisms that need one)."""


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


class ParamsLike(Protocol):
    """What every parameter class offers: its mechanism name and the per-report epsilon it guarantees."""

    name: ClassVar[str]

    @property
    def epsilon(self) -> float: ...


P = TypeVar("P", bound=ParamsLike)


class MechanismSpec(abc.ABC, Generic[P]):
    """Everything about one mechanism, for every layer; subclass it once per mechanism (``SPEC``).

    Class attributes describe the mechanism; methods take the parameters (an instance of ``params_type``)
    first. Abstract methods are what every mechanism defines; the others have a default (no longitudinal
    bound, no secret, no exact sum sampler) or raise ``NotImplementedError`` where a kind does not need them
    (e.g. :meth:`support` outside :attr:`Kind.SUPPORT`). Methods marked *numpy* are for the server and
    simulations: they import numpy when called, and the device path never calls them.

    Attributes:
        name: the mechanism's name (``make_params(name, ...)``, ``--mechanism NAME``); equal to
            ``params_type.name``.
        params_type: the frozen parameter dataclass.
        kind: how the server estimates (:class:`Kind`).
        wire: the ``ldp.v1`` oneof members (:class:`WireNames`).
        takes_domain: ``make`` needs a declared domain (a size or labels).
        fixed_domain_size: the number of values a simulated population has when the mechanism fixes it (rr:
            2, value 1 = yes), else None.
        per_device_state: a device keeps state across reports (a client secret, a memoized response), so a
            simulation needs one client per simulated user; False lets one reporter stand for many users.
        epsilon_field: the field that sets the mechanism instead of ``epsilon`` (``truth_probability``),
            named when neither is given; None if epsilon is not the usual way to set it.
        chosen_by_auto: ``auto`` compares this mechanism (a frequency oracle over a declared domain):
            ``make`` at an epsilon with no other field builds its lowest-variance setting, and it offers
            :meth:`variance` and :meth:`report_bits`, the two figures ``auto`` chooses by.
    """

    name: ClassVar[str]
    params_type: ClassVar[type[Any]]
    kind: ClassVar[Kind]
    wire: ClassVar[WireNames]
    takes_domain: ClassVar[bool] = False
    fixed_domain_size: ClassVar[int | None] = None
    per_device_state: ClassVar[bool] = False
    epsilon_field: ClassVar[str | None] = None
    chosen_by_auto: ClassVar[bool] = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    # ------------------------------------------------------------------------------------ parameters

    @abc.abstractmethod
    def make(self, *, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]) -> P:
        """The parameters by name: what ``make_params(name, epsilon=..., domain=..., fields=...)`` returns.

        ``fields`` maps init fields of the parameter class to values (strings are converted). Raises
        InvalidParameterError naming the field and what is allowed.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def make_args(self, params: P) -> MakeArgs:
        """The inverse of :meth:`make`: ``make(**make_args(p))`` equals ``p`` (campaign files, CLIs)."""
        raise NotImplementedError

    @abc.abstractmethod
    def params_to_proto(self, params: P) -> Message:
        """The ``Campaign.mechanism`` member message (``wire.campaign``) of ``params``."""
        raise NotImplementedError

    @abc.abstractmethod
    def params_from_proto(self, msg: Any) -> P:
        """Validated parameters of a ``Campaign.mechanism`` member message.

        Raises InvalidParameterError with the field named relative to the member (``domain.size``); the
        caller prefixes the member.
        """
        raise NotImplementedError

    def epsilon_inf(self, params: P) -> float:
        """Longitudinal bound over unlimited reports of one unchanging value; +inf when there is none
        (fresh noise per report: k reports cost k epsilon)."""
        return math.inf

    def wire_names(self, params: P) -> WireNames:
        """The ``ldp.v1`` oneof members of a campaign of ``params``: :attr:`wire`, except for a wrapper whose
        reports are those of the mechanism it wraps (set-valued: its inner oracle's batch and report
        members)."""
        return self.wire

    def report_bits(self, params: P) -> int:
        """The size of one report as uploaded, in bits (what ``auto``'s ``max_report_bits`` budget counts).
        Offered by the mechanisms ``auto`` compares (:attr:`chosen_by_auto`)."""
        raise NotImplementedError

    def variance(self, params: P, frequency: float = 0.0) -> float:
        """n Var[f_hat_v] at true frequency ``frequency`` of item v (module docstring; ``auto`` compares it
        at f -> 0, Wang et al.'s Var*), from the scalar :meth:`support_rates`. Kind.SUPPORT only."""
        p_star, q_star = self.support_rates(params)
        return oracle_variance(float(p_star), float(q_star), frequency)  # type: ignore[arg-type]

    def check_new_campaign(self, msg: Any) -> None:
        """Refuse what a NEW campaign may not set in its ``Campaign.mechanism`` member message ``msg``,
        though a stored one may (a campaign read back is never refused for it). By default nothing.

        RAPPOR: f = 0 (also an unset f) turns off the permanent randomized response and needs the message's
        explicit ``allow_f_zero``. Raises InvalidParameterError with the field relative to the member.
        """

    # ---------------------------------------------------------------------------------------- device

    def needs_secret(self, params: P) -> bool:
        """The encoder needs the device's client secret (RAPPOR's cohort and permanent response)."""
        return False

    @abc.abstractmethod
    def encoder(self, params: P, *, campaign_id: str, secret: SecretSource | None) -> Callable[[Any], Any]:
        """The per-report ``encode`` (OS CSPRNG, no numpy) of a device.

        ``secret`` is called only when :meth:`needs_secret`, so an app of a mechanism without one never
        creates a secret file.
        """
        raise NotImplementedError

    # ----------------------------------------------------------------------------------------- codec

    @abc.abstractmethod
    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: P, columns: Any) -> None:
        """Set ``msg.count`` and the payload (``wire.batch``) from batch columns (numpy).

        The columns are checked with the rules of :meth:`batch_from_proto`, so a batch built here is one
        the server accepts. Raises InvalidReportError.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: P, n: int) -> Any:
        """Validated columns of a batch of ``n`` reports (numpy; ids, count and payload kind are already
        checked by ``wire``). Raises InvalidReportError naming the field and value; accepts or rejects the
        batch whole."""
        raise NotImplementedError

    @abc.abstractmethod
    def report_to_proto(self, msg: reports_pb2.Report, params: P, output: Any) -> None:
        """Set ``msg``'s value (``wire.report``) from one per-report encoder output (pure Python)."""
        raise NotImplementedError

    @abc.abstractmethod
    def report_from_proto(self, msg: reports_pb2.Report, params: P) -> Any:
        """Validated columns of a batch of one from a single report (numpy; ids and member checked)."""
        raise NotImplementedError

    @abc.abstractmethod
    def batch_from_reports(self, params: P, reports: Sequence[Any]) -> Any:
        """Batch columns from per-report encoder outputs (numpy; device side, a loop over the reports).
        ``reports`` is not empty (``wire`` checks the count)."""
        raise NotImplementedError

    @abc.abstractmethod
    def row_fields(self, params: P) -> tuple[RowField, ...]:
        """The reporter's journal row of one report, field by field in row order (pure Python).

        Paths are relative to the batch (``(wire.batch,)`` or ``(wire.batch, column)``); a field marked
        ``packed`` is one byte 0/1 packed 8 per byte in its column.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def row_packer(self, params: P) -> Callable[[Any], bytes]:
        """The journal row (``row_fields``' layout) of one per-report encoder output (pure Python)."""
        raise NotImplementedError

    @abc.abstractmethod
    def row_unpacker(self, params: P) -> Callable[[bytes], Any]:
        """Inverse of :meth:`row_packer`: the encoder output a journal row stands for (to validate it)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------ simulation

    @abc.abstractmethod
    def encode_batch(
        self,
        params: P,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        """One report per simulated user (numpy, seeded ``rng`` only): batch columns.

        ``values`` are population indices in [0, D): index i is :meth:`input_value` ``(params, i)`` (and
        ``labels[i]`` is its string, for mechanisms that hash strings).
        """
        raise NotImplementedError

    def encode_batch_shared(
        self,
        params: P,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
        device_words: NDArray[np.uint64],
    ) -> Any:
        """:meth:`encode_batch` for simulated devices that also report to other campaigns (numpy).

        ``device_words`` holds one uniform 64-bit word per user: what the device derives from its client
        secret, which a mechanism with per-device state takes its state from (string RAPPOR's cohort is
        ``word mod m``, as the client's HMAC prefix mod m), so that campaigns sharing devices share it (a
        paired campaign's two sides). By default the words are not used: :meth:`encode_batch`.
        """
        return self.encode_batch(params, values, rng, campaign_id=campaign_id, labels=labels)

    def sum_sampler(self, params: P) -> SumSampler | None:
        """Exact sampling of the sums (:class:`SumSampler`), or None when there is none (the simulator then
        encodes every report). The returned function may cache work across repeats."""
        return None

    # ---------------------------------------------------------------------------------------- server

    @abc.abstractmethod
    def layout(self, params: P) -> Layout:
        """The accumulator a campaign of ``params`` needs (:class:`Layout`)."""
        raise NotImplementedError

    @abc.abstractmethod
    def layout_batch(self, params: P, columns: Any) -> Any:
        """The layout's standard input (:class:`Layout` table) for decoded batch columns (numpy).

        Raises InvalidReportError for columns of the wrong kind (e.g. a non-bool array for rr).
        """
        raise NotImplementedError

    def items(self, params: P) -> tuple[str, ...]:
        """Labels of the estimated items, where the parameters fix them (rr: no, yes; grr: the domain)."""
        raise NotImplementedError

    def input_value(self, params: P, index: int) -> Any:
        """The value a device encodes for item ``index`` of :meth:`items` (rr: False/True; grr: the label
        or integer)."""
        raise NotImplementedError

    def inputs(self, params: P) -> tuple[Any, ...]:
        """Every value a device may encode, for exhaustive checks at small parameters; by default the
        input of each item of :meth:`items`, in item order."""
        return tuple(self.input_value(params, i) for i in range(len(self.items(params))))

    def support_rates(self, params: P) -> tuple[Rates, Rates]:
        """``(p*, q*)`` of the items (scalars or one per item; :class:`Support`). Kind.SUPPORT only."""
        raise NotImplementedError

    def support(self, params: P, acc: Any, candidates: Sequence[str] = ()) -> Support:
        """The :class:`Support` of a campaign's accumulator (read through its view protocol). Kind.SUPPORT
        only; ``candidates`` for mechanisms that estimate a candidate list."""
        raise NotImplementedError

    def items_per_user(self, params: P) -> tuple[int, int]:
        """(fewest, most) items one user holds: (1, 1) by default (one value each, so the item counts sum
        to n); set-valued (0, max_items). Post-processing makes the counts consistent with it."""
        return (1, 1)

    def mean_design(self, params: P) -> MeanDesign:
        """The attributes, ranges, scale and variance of a campaign's means (:class:`MeanDesign`).
        Kind.MEAN only."""
        raise NotImplementedError

    def moments(self, params: P, acc: Any) -> Moments:
        """The exact :class:`Moments` of a campaign's accumulator (read through :class:`MomentsView`).
        Kind.MEAN only."""
        raise NotImplementedError

    def encode_values(self, params: P, values: NDArray[np.float64], rng: np.random.Generator) -> Any:
        """One report per simulated user holding real ``values`` of shape (n, A), one column per attribute
        of :meth:`mean_design` (numpy, seeded ``rng`` only): batch columns. Kind.MEAN only."""
        raise NotImplementedError

    # ------------------------------------------------------------------ discovery (Kind.DISCOVERY)
    # The server keeps the best candidates of each level and extends them into the next level's; the
    # generic loop (ldp_aggregator.discovery) asks the spec only for these. Candidates are hashable
    # objects the spec defines (e.g. prefixes); level 0's are fixed by the parameters.

    def discovery_levels(self, params: P) -> int:
        """How many levels a discovery campaign of ``params`` estimates. Kind.DISCOVERY only."""
        raise NotImplementedError

    def discovery_top_k(self, params: P) -> int:
        """How many candidates the server keeps at each level (and reports at the last). Kind.DISCOVERY
        only."""
        raise NotImplementedError

    def discovery_candidates(self, params: P, level: int, kept: Sequence[Hashable]) -> tuple[Hashable, ...]:
        """The candidates tested at ``level``: level 0's from the parameters (``kept`` empty), a later
        level's the extensions of the candidates ``kept`` at the level before. Kind.DISCOVERY only."""
        raise NotImplementedError

    def discovery_prefix(self, params: P, level: int, value: Any) -> Hashable:
        """The candidate of ``level`` that the reports of a user holding ``value`` support as their own
        (for the truth of simulations and exact tests). Kind.DISCOVERY only."""
        raise NotImplementedError

    def discovery_label(self, params: P, candidate: Hashable) -> str:
        """The label of a candidate of the last level: the discovered value. Kind.DISCOVERY only."""
        raise NotImplementedError

    def discovery_same_value(
        self, params: P, level: int, candidate: Hashable
    ) -> tuple[tuple[int, Hashable], ...]:
        """The candidates of earlier levels that stand for exactly the same values as ``candidate`` of
        ``level`` (a prefix that already holds a complete value), as (level, candidate) pairs: their
        groups' reports estimate the same count, which the level loop pools. By default none."""
        return ()

    def discovery_support(
        self, params: P, columns: Any, level: int, candidates: Sequence[Hashable]
    ) -> Support:
        """The :class:`Support` of ``candidates`` among the reports of batch columns that estimate ``level``
        (its ``n``: how many of them do; numpy). Kind.DISCOVERY only."""
        raise NotImplementedError

    # ------------------------------------------------------------- as a side of a paired campaign

    def report_likelihood(self, params: P, columns: Any) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Per-report log-likelihood of every item of :meth:`items`, from batch columns (numpy).

        Returns ``(log_lik, offset)``: log P(report r | item v) = ``log_lik[r, v] + offset[r]``, the offset
        being any part common to all items (the association's EM of a paired campaign reads only the
        differences between items). Kind.SUPPORT mechanisms that can be a paired side.
        """
        raise NotImplementedError

    def report_patterns(self, params: P) -> int | None:
        """How many distinct reports the mechanism can send, when few enough to count each (a paired
        campaign then keeps the joint table of both sides' patterns); None otherwise (the default)."""
        return None

    def pattern_index(self, params: P, columns: Any) -> NDArray[np.int64]:
        """The pattern (in [0, :meth:`report_patterns`)) of each report of batch columns (numpy)."""
        raise NotImplementedError

    def pattern_columns(self, params: P, patterns: NDArray[np.int64]) -> Any:
        """Batch columns of reports given by their patterns: the inverse of :meth:`pattern_index`."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------ conformance tests

    @abc.abstractmethod
    def examples(self) -> tuple[P, ...]:
        """A few small parameter objects for exhaustive checks (enumeration of every output)."""
        raise NotImplementedError

    @abc.abstractmethod
    def exact_outputs(self, params: P, value: Any) -> Mapping[Hashable, Fraction]:
        """The exact output distribution of the encoder for input ``value``: every possible per-report
        output (hashable, as ``encode`` returns it) with its probability, from the quantized thresholds
        (small parameters only: it enumerates).

        A mechanism whose reports carry public randomness drawn independently of the value (local
        hashing's 64-bit seeds) enumerates it over a small fixed sample, each with equal weight: the
        distribution conditioned on that sample. :meth:`exact_output_probability` then gives the exact
        probability of any other output."""
        raise NotImplementedError

    def exact_output_probability(self, params: P, value: Any, output: Any) -> Fraction:
        """P(encode(value) = output) exactly, for any output (0 for an impossible one); conditioned on the
        output's public randomness where :meth:`exact_outputs` enumerates a sample of it. By default looked
        up in :meth:`exact_outputs`."""
        return self.exact_outputs(params, value).get(output, Fraction(0))

    def campaign_inputs(self, params: P, campaign_id: str) -> tuple[Any, ...]:
        """:meth:`inputs` for a device of campaign ``campaign_id``: mechanisms whose encoding depends on the
        campaign (string RAPPOR hashes its id into the Bloom filters) choose inputs that show its worst
        case there. By default :meth:`inputs`."""
        return self.inputs(params)

    def campaign_outputs(self, params: P, value: Any, campaign_id: str) -> Mapping[Hashable, Fraction]:
        """:meth:`exact_outputs` for a device of campaign ``campaign_id`` (see :meth:`campaign_inputs`).
        By default :meth:`exact_outputs`."""
        return self.exact_outputs(params, value)
