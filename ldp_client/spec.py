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
view protocols of :mod:`ldp_client.layouts` (:class:`CountsView`, :class:`BitsView`, :class:`SupportView`)
and returns a :class:`Support`, which the one pure-oracle estimator of ``ldp_aggregator.estimators`` turns
into estimates.

**The Support contract** (Wang, Blocki, Li, Jha, "Locally Differentially Private Protocols for Frequency
Estimation", USENIX Security 2017, §4). A report *supports* item v with probability p* if its user holds v
and q* otherwise (``p_star`` / ``q_star``; here they mean exactly this and nothing else). With C_v of the n
reports supporting v and c_v users holding it::

    count_hat_v = (C_v - n q*) / (p* - q*)                                         (unbiased for c_v)
    Var[count_hat_v] = (n q*(1 - q*) + c_v (p* - q*)(1 - p* - q*)) / (p* - q*)^2

The rates may differ between items (binary RR: "yes" has p* = P(yes|yes), q* = P(yes|no); "no" has
p* = 1 - P(yes|no), q* = 1 - P(yes|yes)), so they are a scalar or one value per item. A mechanism whose
reports are not independent given the counts (a sketch's hash rows are shared by every user of a campaign,
so users holding one value collide together) adds the rest of its variance as ``extra_variance``, on the
count scale, to Var[count_hat_v].

Items are fixed by the parameters (a declared domain), or, for a mechanism that hashes strings of any kind
(:attr:`MechanismSpec.estimates_candidates`), they are candidate strings given when estimating (the
campaign's or the request's).

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
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeAlias, TypeVar

from ldp_client._oracle_math import oracle_variance
from ldp_client.codecs import RowField
from ldp_client.layouts import (
    LAYOUT_SUMS,
    BitsView,
    CountsView,
    HaarLevels,
    KeyValueCounts,
    Layout,
    LayoutKind,
    MarginalTables,
    MeanDesign,
    Moments,
    MomentsView,
    PairedView,
    RangeLevels,
    Rates,
    SumSampler,
    Support,
    SupportView,
)

if TYPE_CHECKING:
    import numpy as np
    from google.protobuf.message import Message
    from numpy.typing import NDArray

    from ldp_client._proto.ldp.v1 import reports_pb2
    from ldp_client.domain import DomainLike
    from ldp_client.secret import ClientSecret

__all__ = [
    "LAYOUT_SUMS",
    "BitsView",
    "CountsView",
    "KeyValueCounts",
    "Kind",
    "Layout",
    "LayoutKind",
    "MakeArgs",
    "MarginalTables",
    "MeanDesign",
    "MechanismSpec",
    "Moments",
    "MomentsView",
    "PairedView",
    "ParamsLike",
    "RangeLevels",
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


SecretSource: TypeAlias = "ClientSecret | Callable[[], ClientSecret]"
"""The device's client secret, or a function returning it (called only by mechanisms that need one)."""


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
        estimates_candidates: a device encodes any string (hashed), so the parameters fix no items: the
            items estimated are candidate strings given when estimating (the campaign's, or the request's;
            kind SUPPORT passes them to :meth:`candidate_support`, kind RAPPOR decodes them); simulations
            hash their population's labels.
        reports_per_device: the most reports one device may send to one campaign (discovery: 1, its
            epsilon is user-level only if every user reports once), enforced by the device ledger before
            anything is encoded; None: no such limit (the budget caps still apply).
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
    estimates_candidates: ClassVar[bool] = False
    reports_per_device: ClassVar[int | None] = None
    takes_range: ClassVar[bool] = True
    """Kind MEAN: values are placed by a range ``lo``/``hi`` (or ``ranges``), which a simulation defaults to
    its population's; False for a mechanism with a geometry of its own (gaussian_vector's L2 ball)."""

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

    def delta(self, params: P) -> float:
        """The delta of the (epsilon, delta) guarantee of one report: 0 for a pure epsilon-LDP mechanism
        (every one but an approximate-DP mechanism such as the Gaussian, whose ``epsilon`` holds only with
        this delta). The device ledger adds it up per report."""
        return 0.0

    def memo_identity(self, params: P, value: Any) -> bytes | None:
        """Bytes equal for two values exactly when the mechanism memoizes one permanent response for both
        (RAPPOR: the value's UTF-8 bytes, its domain index, its bit), for the device ledger's memo key
        (charged epsilon_inf once per identity). Raises DomainError for a value outside the domain.

        None (the default) when the mechanism has no such identity: a memoized mechanism (finite
        :meth:`epsilon_inf`) is then charged epsilon_inf for every report, as if each were a new value
        (an over-count, never an under-count). Unused for mechanisms without a longitudinal bound."""
        return None

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
        """The :class:`Support` of a campaign's accumulator (read through its view protocol) for the items
        of :meth:`items`. Kind.SUPPORT only (a mechanism that estimates candidate strings:
        :meth:`candidate_support`)."""
        raise NotImplementedError

    def candidate_support(
        self, params: P, acc: Any, candidates: Sequence[str], *, campaign_id: str
    ) -> Support:
        """The :class:`Support` of candidate strings (validated, distinct, at least one), the items of a
        mechanism that :attr:`estimates_candidates`, for campaign ``campaign_id`` (whose keys hash them).
        Kind.SUPPORT only."""
        raise NotImplementedError

    def range_levels(self, params: P, acc: Any) -> RangeLevels | HaarLevels | None:
        """The level hierarchy of a campaign whose reports answer range queries over its ordered domain
        (:class:`RangeLevels` or :class:`HaarLevels`, read by ``ldp_aggregator.ranges``), or None: the
        mechanism answers none."""
        return None

    def key_value_counts(self, params: P, acc: Any) -> KeyValueCounts | None:
        """The per-key report counts of a key-value campaign (:class:`KeyValueCounts`, read by
        ``ldp_aggregator.key_values`` for each key's frequency and mean value), or None: the mechanism
        collects no key-value data (issue 18)."""
        return None

    def marginal_tables(self, params: P, acc: Any) -> MarginalTables | None:
        """The marginal groups of a campaign whose reports answer marginal queries over several categorical
        attributes (:class:`MarginalTables`, read by ``ldp_aggregator.marginals``), or None: none."""
        return None

    def item_table(self, params: P) -> bool:
        """Whether :meth:`support` estimates the items (kind SUPPORT). True by default; a marginal mechanism
        whose campaign did not choose the full attribute set answers marginals only."""
        return True

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

    def largest(self) -> tuple[P, ...]:
        """Parameters with every size at the largest value the parameter class accepts, for the hardening
        sweep (``tests/ldp_aggregator/test_fuzz.py``: each campaign is created on a memory-capped server,
        accepted or refused before allocating, then reported to and estimated). By default none: the
        sweep's own table covers the mechanisms registered before this hook."""
        return ()

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

    def exact_memoized_outputs(self, params: P, value: Any) -> Mapping[Hashable, Fraction] | None:
        """What unlimited reports of one unchanging ``value`` reveal at most, as an exact distribution: the
        memoized part of the report (the coins a device derives once from its client secret, enumerated as
        the distribution they are drawn from), whose max ratio between two values is e^epsilon_inf
        (:meth:`epsilon_inf`, checked by the conformance test). None (the default): the mechanism offers no
        such enumeration (fresh noise per report, or a bound proved elsewhere: RAPPOR's)."""
        return None

    def campaign_inputs(self, params: P, campaign_id: str) -> tuple[Any, ...]:
        """:meth:`inputs` for a device of campaign ``campaign_id``: a mechanism whose encoding depends on the
        campaign (it hashes strings with keys derived from the campaign id: string RAPPOR's Bloom filters, a
        sketch's hash rows) chooses inputs there that show its worst case (for the exact epsilon) and meet
        the model its estimator assumes at the expected counts (a sketch: every pair of inputs collides in
        exactly the expected share of hash rows). By default :meth:`inputs`."""
        return self.inputs(params)

    def campaign_outputs(self, params: P, value: Any, campaign_id: str) -> Mapping[Hashable, Fraction]:
        """:meth:`exact_outputs` for a device of campaign ``campaign_id`` (see :meth:`campaign_inputs`).
        By default :meth:`exact_outputs`."""
        return self.exact_outputs(params, value)
