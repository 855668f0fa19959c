"""Hierarchical intervals (``hio``): range queries over an ordered domain of D values.

Method (Cormode, Kulkarni, Srivastava, "Answering range queries under local differential privacy", VLDB
2019, §4, the hierarchical histogram "HH"; the hierarchy of Wang et al., "Answering multi-dimensional
analytical queries under local differential privacy", SIGMOD 2019): a tree of branching factor B over the
D ordered values (padded to B^h leaves, h = ceil(log_B D) levels below the root). Level l (1 <= l <= h)
has B^l nodes; node j of level l covers the values [j B^(h-l), (j+1) B^(h-l)). Each device belongs to one
level, uniform on 1..h and derived from its client secret (HMAC-SHA256(secret, label || campaign id), so
it stays put across reports and no identifier leaves the device), and reports the node holding its value at
that level with the better oracle for the level's B^l nodes (CKS §4.2): generalized randomized response
(:mod:`ldp_client.mechanisms.grr`, reused) at the ``grr_levels`` top levels, where B^l is small, and
optimized local hashing (:mod:`ldp_client.mechanisms.olh`, reused, the same g and p at every such level)
below. A GRR level's probability is the largest with epsilon at most local hashing's, so the levels share
one epsilon bound. A report is (level, a, b, bucket), with a = b = 0 and bucket = the reported node at a
GRR level; epsilon is the largest of the levels' (local hashing's when a level uses it), whatever the level
(the level is independent of the value).

The default B = 4 is CKS's recommendation for HH with OLH at moderate epsilon (their §4.4 finds B between
4 and 8 best; Wang et al. argue for about 5). ``from_epsilon`` uses GRR at every level where its variance
q(1-q)/(p-q)^2 is below local hashing's (B^l < about 3 e^eps + 2, Wang et al. 2017 §4.5).

Server. The ``support`` accumulator holds, level after level, the support count of every node (a report
(l, a, b, y) supports node v of level l when v hashes into y under the seed, or, at a GRR level, when
y = v), then the number of reports of each level n_l: one vector of sum_l B^l + h counts, fed at ingest
per level (a bincount at a GRR level, local hashing's vectorised support test below). Two reads of it:

- the spec's :meth:`HIOSpec.support` (kind SUPPORT, the generic frequency table): the D leaves, from the
  leaf level's reports, with the rates a user of the whole population has: it supports leaf v with
  p*_h / h when it holds v and q*_h / h otherwise, p*_h and q*_h the leaf oracle's (its level is uniform
  and independent of its value), so the one estimator of :mod:`ldp_aggregator.estimators` is unbiased
  with its variance;
- :meth:`HIOSpec.range_levels` (:class:`ldp_client.layouts.RangeLevels`): per level the node counts, n_l
  and the level oracle's rates, which :mod:`ldp_aggregator.ranges` turns into consistent range answers with
  standard errors (formulas there, and in docs/ranges.md).

Importing this module does not import numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from ldp_client import _oracle_math
from ldp_client._oracle_math import grr_like_threshold, oracle_variance
from ldp_client._prob import quantize_probability, threshold_to_probability
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.codecs import (
    as_int,
    check_indices,
    domain_from_proto,
    domain_to_proto,
)
from ldp_client.domain import (
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
from ldp_client.layouts import RangeLevels
from ldp_client.mechanisms._level_rows import (
    LevelRowsCodec,
    check_seed,
    level_columns,
)
from ldp_client.mechanisms.grr import GRREncoder, GRRParams, exact_channel
from ldp_client.mechanisms.olh import (
    LocalHashEncoder,
    OLHParams,
    balanced_seeds,
    exact_report_probability,
    local_hash_support,
)
from ldp_client.spec import Kind, Layout, MakeArgs, MechanismSpec, SecretSource, Support, WireNames

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ldp_client._proto.ldp.v1 import reports_pb2
    from ldp_client.secret import ClientSecret

__all__ = ["SPEC", "HIOParams", "HIOReport", "HIOSpec", "level_of"]

LEVEL_LABEL = b"ldp-hio-level-v1:"
"""The HMAC message prefix of a device's level (followed by the campaign id, UTF-8)."""
MAX_BRANCHING = 1 << 10
MAX_HIO_NODES = 1 << 17
"""Bound on the nodes of the tree (sum of B^l): the accumulator holds one count per node (1 MiB here, so
that a campaign's export stays within gRPC's default 4 MiB message)."""
MAX_HIO_DOMAIN = 1 << 15
"""Bound on D: an estimate lists the D values (about 60 bytes each) in one 4 MiB message."""
_U16_LE = "<u2"
_FIELDS = ("branching", "g", "truth_probability", "grr_levels")


def _levels(d: int, branching: int) -> int:
    """h = ceil(log_B d), at least 1, in integers (no floating-point logarithm)."""
    h, width = 1, branching
    while width < d:
        h, width = h + 1, width * branching
    return h


@dataclass(frozen=True, kw_only=True)
class HIOParams:
    """Hierarchical intervals over an ordered domain (module docstring; CKS VLDB 2019, §4).

    Attributes:
        domain: the D ordered values (an integer domain 0..D-1, or labels in their order), 2 <= D.
        branching: B, the fan-out of the tree, 2 <= B <= 1024.
        g: local hashing's buckets at every level, 2 <= g.
        truth_probability: P(a report's bucket is the true one), in (1/g, 1).
        grr_levels: the top levels 1..grr_levels report with GRR over their B^l nodes (probability: the
            largest with epsilon at most local hashing's), 0 <= grr_levels <= h.
    """

    name: ClassVar[str] = "hio"
    domain: Domain
    branching: int = 4
    g: int
    truth_probability: float
    grr_levels: int = 0
    levels: int = field(init=False, repr=False, compare=False)
    level_params: tuple[OLHParams | GRRParams, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.domain, Domain):
            object.__setattr__(self, "domain", Domain.of(self.domain))
        int_field("branching", self.branching, 2, MAX_BRANCHING)
        int_field("g", self.g, 2, _oracle_math.MAX_LOCAL_HASH_BUCKETS)
        quantize_probability("truth_probability", self.truth_probability)
        d, b = self.domain.size, self.branching
        if d > MAX_HIO_DOMAIN:
            raise InvalidParameterError("domain", d, f"a domain of at most {MAX_HIO_DOMAIN} ordered values")
        h = _levels(d, b)
        if sum(b**level for level in range(1, h + 1)) > MAX_HIO_NODES:
            raise InvalidParameterError(
                "domain", d, f"a domain whose tree of branching {b} has at most {MAX_HIO_NODES} nodes"
            )
        object.__setattr__(self, "levels", h)
        int_field("grr_levels", self.grr_levels, 0, h)
        olh = tuple(
            OLHParams(domain=Domain.of(b**level), g=self.g, truth_probability=self.truth_probability)
            for level in range(1, h + 1)
        )
        per_level: list[OLHParams | GRRParams] = list(olh)
        for level in range(1, self.grr_levels + 1):
            per_level[level - 1] = _grr_level(b**level, olh[0].epsilon, self.grr_levels)
        object.__setattr__(self, "level_params", tuple(per_level))

    @classmethod
    def from_epsilon(
        cls, domain: DomainLike, epsilon: float, *, branching: int = 4, g: int | None = None
    ) -> HIOParams:
        """HIO at ``epsilon``: every level's local hashing at ``epsilon`` (g about e^eps + 1 by default;
        p rounded toward privacy as :meth:`OLHParams.from_epsilon` does)."""
        eps = check_epsilon(epsilon)
        dom = Domain.of(domain)
        oracle = OLHParams.from_epsilon(2, eps, g=g)
        olh_var = oracle_variance(oracle.p_star, oracle.q_star)
        grr_levels, h = 0, _levels(dom.size, branching)
        while grr_levels < h and grr_like_threshold(branching ** (grr_levels + 1), oracle.epsilon):
            grr = _grr_level(branching ** (grr_levels + 1), oracle.epsilon, grr_levels + 1)
            if oracle_variance(grr.p, grr.q) >= olh_var:
                break
            grr_levels += 1
        params = cls(
            domain=dom,
            branching=branching,
            g=oracle.g,
            truth_probability=oracle.truth_probability,
            grr_levels=grr_levels,
        )
        report_quantization(eps, params.epsilon)
        return params

    @property
    def epsilon(self) -> float:
        """The largest of the levels' epsilons: local hashing's ln(p (g-1)/(1-p)) when a level uses it."""
        return max(lp.epsilon for lp in self.level_params)

    def uses_grr(self, level: int) -> bool:
        """Whether level ``level`` (1..h) reports with GRR (else local hashing)."""
        return level <= self.grr_levels

    def bucket_bound(self, level: int) -> int:
        """Reported values of a level are below this: B^l at a GRR level, g otherwise."""
        return int(self.branching**level) if self.uses_grr(level) else self.g

    def level_rates(self, level: int) -> tuple[float, float]:
        """(p*, q*) of a level's oracle."""
        lp = self.level_params[level - 1]
        return (lp.p, lp.q) if isinstance(lp, GRRParams) else (lp.p_star, lp.q_star)

    @property
    def leaves(self) -> int:
        """B^h, the leaves of the padded tree (>= D)."""
        return int(self.branching**self.levels)

    def level_sizes(self) -> tuple[int, ...]:
        """B^l nodes for l = 1..h."""
        return tuple(self.branching**level for level in range(1, self.levels + 1))


def _grr_level(size: int, epsilon: float, grr_levels: int) -> GRRParams:
    """GRR over a level's ``size`` nodes with the largest probability whose epsilon is at most ``epsilon``."""
    t = grr_like_threshold(size, epsilon)
    if t == 0:
        raise InvalidParameterError(
            "grr_levels", grr_levels, f"levels whose GRR can reach epsilon {epsilon:.6g}"
        )
    return GRRParams(domain=Domain.of(size), truth_probability=threshold_to_probability(t))


def _make(*, epsilon: float | None, domain: object, fields: dict[str, object]) -> HIOParams:
    dom = require_domain(domain, "hio")
    branching = take_field(fields, "branching", int, "hio") if "branching" in fields else 4
    g = take_field(fields, "g", int, "hio") if "g" in fields else None
    grr_levels = take_field(fields, "grr_levels", int, "hio") if "grr_levels" in fields else 0
    if epsilon is not None:
        no_more_fields(fields, "hio", ("branching", "g"))
        return HIOParams.from_epsilon(dom, epsilon, branching=branching, g=g)  # type: ignore[arg-type]
    tp = take_field(fields, "truth_probability", float, "hio") if "truth_probability" in fields else None
    no_more_fields(fields, "hio", _FIELDS)
    if tp is None or g is None:
        raise InvalidParameterError("params", sorted(fields), "epsilon, or g and truth_probability for hio")
    return HIOParams(
        domain=dom,
        branching=branching,  # type: ignore[arg-type]
        g=g,  # type: ignore[arg-type]
        truth_probability=tp,  # type: ignore[arg-type]
        grr_levels=grr_levels,  # type: ignore[arg-type]
    )


def level_of(params: HIOParams, campaign_id: str, secret: ClientSecret) -> int:
    """The device's level in [1, h]: 1 + (first 8 bytes of HMAC-SHA256(secret, LEVEL_LABEL || campaign id),
    big-endian) mod h. The modulo bias is below h / 2**64."""
    word = int.from_bytes(secret.prf(LEVEL_LABEL + campaign_id.encode("utf-8"))[:8], "big")
    return 1 + word % params.levels


class HIOReport(NamedTuple):
    """One report: the device's level (1..h), local hashing's seed (a, b) and bucket."""

    level: int
    a: int
    b: int
    bucket: int


def node_of(params: HIOParams, level: int, index: int) -> int:
    """The node of level ``level`` holding the value of index ``index``: index // B^(h - level)."""
    width: int = params.branching ** (params.levels - level)
    return index // width


class HIOEncoder:
    """The device's encoder: its level is fixed (from its secret); each value is reported as the node of
    that level holding it, through local hashing's per-report encoder (OS CSPRNG)."""

    __slots__ = ("_grr", "_level", "_olh", "params")

    def __init__(self, params: HIOParams, *, level: int) -> None:
        self.params = params
        self._level = int_field("level", level, 1, params.levels)
        lp = params.level_params[level - 1]
        self._grr = GRREncoder(lp) if isinstance(lp, GRRParams) else None
        self._olh = None if isinstance(lp, GRRParams) else LocalHashEncoder(lp)

    def encode(self, value: str | int) -> HIOReport:
        node = node_of(self.params, self._level, self.params.domain.index(value))
        if self._olh is None:
            assert self._grr is not None
            return HIOReport(self._level, 0, 0, self._grr.encode_index(node))
        r = self._olh.encode_index(node)
        return HIOReport(self._level, r.a, r.b, r.bucket)


# ------------------------------------------------------------------------------------------------ codec


def _report_value(field_name: str, report: object, params: HIOParams) -> tuple[int, int, int, int]:
    missing = object()
    parts = [getattr(report, name, missing) for name in ("level", "a", "b", "bucket")]
    if any(p is missing for p in parts):
        raise InvalidReportError(field_name, report, "an HIOReport(level, a, b, bucket)")
    level = as_int(f"{field_name}.level", parts[0], f"a level in [1, {params.levels}]")
    if not 1 <= level <= params.levels:
        raise InvalidReportError(f"{field_name}.level", level, f"a level in [1, {params.levels}]")
    a, b = check_seed(field_name, parts[1], parts[2])
    bound = params.bucket_bound(level)
    y = as_int(f"{field_name}.bucket", parts[3], f"a bucket in [0, {bound - 1}]")
    if not 0 <= y < bound:
        raise InvalidReportError(f"{field_name}.bucket", y, f"a bucket in [0, {bound - 1}]")
    if params.uses_grr(level) and (a or b):
        raise InvalidReportError(f"{field_name}.a", a, f"0 (no seed) at GRR level {level}")
    return level, a, b, y


def _check_levels(levels: NDArray[Any], params: HIOParams, field_name: str) -> None:
    if levels.size and (int(levels.min()) < 1 or int(levels.max()) > params.levels):
        bad = int(levels.min()) if int(levels.min()) < 1 else int(levels.max())
        raise InvalidReportError(field_name, bad, f"a level in [1, {params.levels}]")


def _check_values(levels: Any, a: Any, b: Any, y: Any, params: HIOParams, field_name: str) -> None:
    """Each report's bucket below its level's bound (g, or B^l at a GRR level), and no seed at a GRR
    level; vectorised over the batch (levels already checked)."""
    import numpy as np

    if not levels.size:
        return
    lv = np.asarray(levels, dtype=np.int64)
    bounds = np.array([0, *(params.bucket_bound(level) for level in range(1, params.levels + 1))])
    over = np.asarray(y, dtype=np.int64) >= bounds[lv]
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise InvalidReportError(
            f"{field_name}.buckets", int(y[i]), f"a bucket in [0, {bounds[lv[i]] - 1}] at level {int(lv[i])}"
        )
    seeded = (lv <= params.grr_levels) & ((np.asarray(a) != 0) | (np.asarray(b) != 0))
    if seeded.any():
        i = int(np.flatnonzero(seeded)[0])
        raise InvalidReportError(f"{field_name}.a", int(a[i]), f"0 (no seed) at GRR level {int(lv[i])}")


# ------------------------------------------------------------------------------------------------- spec


class HIOSpec(LevelRowsCodec, MechanismSpec[HIOParams]):
    """Hierarchical intervals for every layer (:mod:`ldp_client.spec`; module docstring).

    Wire: ``Campaign.hio`` (``HierarchicalIntervalParams``); batch columns ``levels`` (u16), ``a``, ``b``
    (u64), ``buckets`` (u32) of ``ReportBatch.hio``; ``Report.hio`` one (level, a, b, bucket). Journal row:
    u16 level, u64 a, u64 b, u32 bucket. Accumulator: ``support`` of sum_l B^l node counts and h level
    counts. Items: the D values (the leaf level); ranges through :meth:`range_levels`.
    """

    name: ClassVar[str] = HIOParams.name
    params_type: ClassVar[type[Any]] = HIOParams
    kind: ClassVar[Kind] = Kind.SUPPORT
    wire: ClassVar[WireNames] = WireNames(campaign="hio", batch="hio", report="hio")
    level_field: ClassVar[str] = "levels"
    report_type: ClassVar[Callable[..., Any]] = HIOReport
    takes_domain: ClassVar[bool] = True
    per_device_state: ClassVar[bool] = True  # the level comes from the client secret: one client per user
    epsilon_field: ClassVar[str | None] = "truth_probability"

    def make(
        self, *, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]
    ) -> HIOParams:
        return _make(epsilon=epsilon, domain=domain, fields=dict(fields))

    def make_args(self, params: HIOParams) -> MakeArgs:
        dom = params.domain
        return MakeArgs(
            domain=dom.labels if dom.labels is not None else dom.size,
            fields={
                "branching": params.branching,
                "g": params.g,
                "truth_probability": params.truth_probability,
                "grr_levels": params.grr_levels,
            },
        )

    def params_to_proto(self, params: HIOParams) -> campaign_pb2.HierarchicalIntervalParams:
        return campaign_pb2.HierarchicalIntervalParams(
            domain=domain_to_proto(params.domain),
            branching=params.branching,
            g=params.g,
            truth_probability=params.truth_probability,
            grr_levels=params.grr_levels,
        )

    def params_from_proto(self, msg: campaign_pb2.HierarchicalIntervalParams) -> HIOParams:
        return HIOParams(
            domain=domain_from_proto(msg.domain),
            branching=msg.branching,
            g=msg.g,
            truth_probability=msg.truth_probability,
            grr_levels=msg.grr_levels,
        )

    def report_bits(self, params: HIOParams) -> int:
        """16 bits of level plus the largest level report: 128 seed bits and the bucket, or a GRR index."""
        buckets = max(
            _oracle_math.ceil_log2(params.bucket_bound(level)) for level in range(1, params.levels + 1)
        )
        return 16 + (128 if params.grr_levels < params.levels else 0) + buckets

    def needs_secret(self, params: HIOParams) -> bool:
        return True

    def encoder(
        self, params: HIOParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        if secret is None:
            raise InvalidParameterError(
                "secret", None, "the device's client secret (hio derives its level from it)"
            )
        key = secret if not callable(secret) else secret()
        return HIOEncoder(params, level=level_of(params, campaign_id, key)).encode

    # -------------------------------------------------------------------------------- codec

    def report_value(self, field: str, report: object, params: HIOParams) -> tuple[int, int, int, int]:
        return _report_value(field, report, params)

    def check_level_values(self, columns: Sequence[Any], params: HIOParams, field: str) -> None:
        levels, a, b, y = columns
        _check_levels(levels, params, f"{field}.levels")
        check_indices(y, 1 << 32, f"{field}.buckets", "a bucket")
        _check_values(levels, a, b, y, params, field)

    def report_from_proto(self, msg: reports_pb2.Report, params: HIOParams) -> Any:

        r = msg.hio
        if not 1 <= r.level <= params.levels:
            raise InvalidReportError("hio.level", r.level, f"a level in [1, {params.levels}]")
        return level_columns([_report_value("hio", r, params)])

    # --------------------------------------------------------------------------- simulation

    def encode_batch(
        self,
        params: HIOParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        """Simulated users (seeded ``rng`` only): a uniform level each (what their secrets give), then local
        hashing's batch encoder on each level's nodes: one vectorised call per level, none per report."""
        import numpy as np

        idx = np.asarray(values)
        d = params.domain.size
        if idx.ndim != 1 or (idx.size and (int(idx.min()) < 0 or int(idx.max()) >= d)):
            raise DomainError("values", f"shape {idx.shape}", f"a 1-D array of indices in [0, {d - 1}]")
        idx = idx.astype(np.int64, copy=False)
        n = idx.shape[0]
        levels = rng.integers(1, params.levels + 1, size=n, dtype=np.int64)
        a = np.zeros(n, dtype=np.uint64)
        b = np.zeros(n, dtype=np.uint64)
        y = np.zeros(n, dtype=np.uint32)
        for level in range(1, params.levels + 1):
            rows = np.flatnonzero(levels == level)
            nodes = idx[rows] // params.branching ** (params.levels - level)
            lp = params.level_params[level - 1]
            if isinstance(lp, GRRParams):  # no seed: a = b = 0
                y[rows] = GRREncoder(lp).encode_batch(nodes, rng)
            else:
                a[rows], b[rows], y[rows] = LocalHashEncoder(lp).encode_batch(nodes, rng)
        return levels.astype(np.uint16), a, b, y

    # ------------------------------------------------------------------------------- server

    def layout(self, params: HIOParams) -> Layout:
        return Layout.support(sum(params.level_sizes()) + params.levels)

    def layout_batch(self, params: HIOParams, columns: Any) -> Any:
        """(n, support): per level, a bincount of the reported nodes (GRR) or local hashing's vectorised
        support test over the level's nodes (one call per level), then the reports of each level."""
        import numpy as np

        levels, a, b, y = self.checked_columns(columns, params, "reports")
        parts = []
        for level, lp in enumerate(params.level_params, start=1):
            rows = levels == level
            if isinstance(lp, GRRParams):  # a GRR report supports the node it names
                parts.append(np.bincount(np.asarray(y[rows], dtype=np.int64), minlength=lp.domain.size))
            else:
                parts.append(local_hash_support(a[rows], b[rows], y[rows], lp))
        per_level = np.bincount(np.asarray(levels, dtype=np.int64), minlength=params.levels + 1)[1:]
        support = np.concatenate([*parts, per_level]).astype(np.int64)
        return int(levels.shape[0]), support

    def items(self, params: HIOParams) -> tuple[str, ...]:
        dom = params.domain
        return tuple(dom.label(i) for i in range(dom.size))

    def input_value(self, params: HIOParams, index: int) -> Any:
        return params.domain.value(index)

    def support_rates(self, params: HIOParams) -> tuple[float, float]:
        p_star, q_star = params.level_rates(params.levels)
        return p_star / params.levels, q_star / params.levels

    def support(self, params: HIOParams, acc: Any, candidates: Sequence[str] = ()) -> Support:
        """The D leaves from the leaf level's support counts, at the whole population's rates (module
        docstring): count_hat = (C - n q*/h) / ((p* - q*)/h)."""
        p_star, q_star = self.support_rates(params)
        start = sum(params.level_sizes()[:-1])
        counts = acc.support[start : start + params.domain.size]
        return Support(labels=self.items(params), counts=counts, n=acc.n, p_star=p_star, q_star=q_star)

    def range_levels(self, params: HIOParams, acc: Any) -> RangeLevels:
        sizes = params.level_sizes()
        counts, start = [], 0
        for size in sizes:
            counts.append(acc.support[start : start + size])
            start += size
        per_level = tuple(int(c) for c in acc.support[start : start + params.levels])
        rates = [params.level_rates(level) for level in range(1, params.levels + 1)]
        return RangeLevels(
            labels=self.items(params),
            branching=params.branching,
            counts=tuple(counts),
            reports=per_level,
            n=int(acc.n),
            p_star=tuple(r[0] for r in rates),
            q_star=tuple(r[1] for r in rates),
        )

    # ------------------------------------------------------------------------------- checks

    def examples(self) -> tuple[HIOParams, ...]:
        return (
            HIOParams(domain=Domain.of(4), branching=2, g=2, truth_probability=0.75),
            HIOParams.from_epsilon(("low", "mid", "high"), math.log(3.0), branching=2, g=4),
            HIOParams(domain=Domain.of(5), branching=2, g=4, truth_probability=0.5),
            HIOParams(domain=Domain.of(6), branching=2, g=4, truth_probability=0.5, grr_levels=2),
        )

    def largest(self) -> tuple[HIOParams, ...]:
        # D = 2^15 with B = 4: 87 380 nodes (B = 2: 2^16 - 2), both within MAX_HIO_NODES.
        return (HIOParams(domain=Domain.of(MAX_HIO_DOMAIN), branching=4, g=2, truth_probability=0.75),)

    def exact_outputs(self, params: HIOParams, value: Any) -> Mapping[Hashable, Fraction]:
        """The level uniform on 1..h (a uniformly random secret), then local hashing of the level's node,
        conditioned on each level's balanced seed sample (:func:`ldp_client.mechanisms.olh.balanced_seeds`
        pairs the nodes exactly as the whole hash family does)."""
        index = params.domain.index(value)
        out: dict[Hashable, Fraction] = {}
        for level, olh in enumerate(params.level_params, start=1):
            node = node_of(params, level, index)
            if isinstance(olh, GRRParams):
                row = exact_channel(olh)[node]
                out.update({HIOReport(level, 0, 0, y): pr / params.levels for y, pr in enumerate(row)})
                continue
            seeds = balanced_seeds(olh.domain.size, params.g)
            weight = Fraction(1, params.levels * len(seeds))
            for a, b in seeds:
                for y in range(params.g):
                    out[HIOReport(level, a, b, y)] = weight * exact_report_probability(olh, node, a, b, y)
        return out

    def exact_output_probability(self, params: HIOParams, value: Any, output: Any) -> Fraction:
        if not isinstance(output, HIOReport) or not 1 <= output.level <= params.levels:
            return Fraction(0)
        if not 0 <= output.bucket < params.bucket_bound(output.level):
            return Fraction(0)
        olh = params.level_params[output.level - 1]
        node = node_of(params, output.level, params.domain.index(value))
        if isinstance(olh, GRRParams):
            if output.a or output.b:
                return Fraction(0)
            return exact_channel(olh)[node][output.bucket] / params.levels
        return Fraction(1, params.levels) * exact_report_probability(
            olh, node, output.a, output.b, output.bucket
        )


SPEC = HIOSpec()
"""Hierarchical intervals, as :mod:`ldp_client.registry` lists it."""
