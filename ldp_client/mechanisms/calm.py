"""CALM marginals (``calm``): k-way marginals of several categorical attributes from one report per user.

Method (Zhang, Wang, Li, He, Chen, "CALM: Consistent Adaptive Local Marginal for Marginal Release under
Local Differential Privacy", CCS 2018, §4): a record holds d categorical attributes, attribute j over a
small domain of c_j labels. The campaign chooses m marginals (attribute sets A_1..A_m, e.g. every pair, or
the full set for a small joint). The users are split into m groups, each device's group uniform on 1..m
and derived from its client secret (HMAC-SHA256(secret, label || campaign id), as ``hio`` derives its
level: it stays put across reports and no identifier leaves the device); group i reports the cell of its
record in marginal A_i (one of c_{A_i} = prod_{j in A_i} c_j cells, row-major over A_i's attributes in
index order) with the better frequency oracle for c_{A_i} cells (CALM §4.2, "adaptive"): generalized
randomized response (:mod:`ldp_client.mechanisms.grr`) where its variance q(1-q)/(p-q)^2 is below local
hashing's, i.e. c < about 3 e^eps + 2 (Wang, Blocki, Li, Jha, USENIX Security 2017, §4.5), else optimized
local hashing (:mod:`ldp_client.mechanisms.olh`, the same g and p for every such marginal). A GRR marginal's
probability is the largest whose epsilon is at most local hashing's, so every group has one epsilon bound
(the largest over the groups; the group is independent of the record). A report is (group, a, b, bucket),
a = b = 0 and bucket = the reported cell for a GRR marginal.

Server. The ``support`` accumulator holds, marginal after marginal, the support count of every cell, then
each group's number of reports: sum_i c_{A_i} + m counts. Reads of it:

- :meth:`CalmSpec.marginal_tables` (:class:`ldp_client.layouts.MarginalTables`): per marginal its cell
  counts, reports and oracle rates, from which :mod:`ldp_aggregator.marginals` estimates every marginal,
  makes them consistent (CALM §4.3) and answers any marginal covered by one chosen set, with standard
  errors (formulas there and in docs/marginals.md);
- :meth:`CalmSpec.support` (kind SUPPORT, the generic frequency table): the items are the full joint's
  records; a campaign that chose the full attribute set estimates them from that group's reports, at the
  whole population's rates p*/m, q*/m (as ``hio``'s leaves). A campaign without the full set has no
  item table (:meth:`CalmSpec.item_table`): its marginals are what it answers.

Importing this module does not import numpy.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from ldp_client import _oracle_math
from ldp_client._oracle_math import grr_like_threshold, oracle_variance
from ldp_client._prob import quantize_probability, threshold_to_probability
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.codecs import (
    U32_LE,
    U64_LE,
    RowField,
    as_int,
    check_count,
    check_length,
    domain_from_proto,
    domain_to_proto,
)
from ldp_client.domain import (
    Domain,
    check_epsilon,
    int_field,
    no_more_fields,
    report_quantization,
    take_field,
)
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.layouts import MarginalTables
from ldp_client.mechanisms._level_rows import (
    check_seed,
    level_columns,
    level_row_fields,
    pack_level_row,
    unpack_level_row,
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

__all__ = ["SPEC", "CalmParams", "CalmReport", "CalmSpec", "group_of", "parse_attributes", "parse_marginals"]

GROUP_LABEL = b"ldp-calm-group-v1:"
"""The HMAC message prefix of a device's group (followed by the campaign id, UTF-8)."""
MAX_ATTRIBUTES = 16
MAX_MARGINALS = 64
MAX_CALM_CELLS = 1 << 17
"""Bound on the cells of all chosen marginals (the accumulator holds one count per cell: 1 MiB)."""
MAX_CALM_JOINT = 1 << 16
"""Bound on the full joint (prod c_j): the items (records) an estimate or a simulation lists."""
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_BAD_LABEL = re.compile(r"[;/=|+,:]")
_U16_LE = "<u2"
_FIELDS = ("attributes", "marginals", "g", "truth_probability", "grr")

Attribute = tuple[str, Domain]


def parse_attributes(text: str) -> tuple[Attribute, ...]:
    """``name=l1/l2/...;name=3;...``: each attribute's labels, or its size (integer values 0..size-1).

    Raises:
        InvalidParameterError: one line naming the attribute at fault and what is allowed.
    """
    out: list[Attribute] = []
    for part in text.split(";"):
        name, sep, dom = part.strip().partition("=")
        if not sep:
            raise InvalidParameterError(
                "attributes", part[:80], "NAME=LABEL/LABEL/... or NAME=SIZE, separated by ';'"
            )
        dom = dom.strip()
        domain = Domain.of(int(dom)) if dom.isdigit() else Domain.of(tuple(x.strip() for x in dom.split("/")))
        out.append((name.strip(), domain))
    return tuple(out)


def parse_marginals(text: str, names: Sequence[str]) -> tuple[tuple[int, ...], ...]:
    """``a+b;b+c;...`` (attribute names) as sorted index tuples; ``all-pairs``, ``all-triples`` or ``full``.

    Raises:
        InvalidParameterError: an unknown attribute (named, with the campaign's attributes).
    """
    text = text.strip()
    d = len(names)
    shortcuts = {"all-pairs": 2, "all-triples": 3, "full": d}
    if text in shortcuts:
        return tuple(itertools.combinations(range(d), min(shortcuts[text], d)))
    where = {n: i for i, n in enumerate(names)}
    out = []
    for part in text.split(";"):
        idx = []
        for raw in part.split("+"):
            a = raw.strip()
            if a not in where:
                raise InvalidParameterError("marginals", a[:80], f"attribute names among {', '.join(names)}")
            idx.append(where[a])
        out.append(tuple(sorted(idx)))
    return tuple(out)


def _strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides: the last index varies fastest."""
    out, s = [], 1
    for c in reversed(sizes):
        out.append(s)
        s *= c
    return tuple(reversed(out))


@dataclass(frozen=True, kw_only=True)
class CalmParams:
    """CALM over categorical attributes (module docstring; Zhang et al., CCS 2018, §4).

    Attributes:
        attributes: (name, domain) of each attribute, 1 to 16, names distinct ([A-Za-z0-9_.-]).
        marginals: the chosen attribute sets (sorted index tuples, distinct), 1 to 64, one per group.
        g: local hashing's buckets, 2 <= g.
        truth_probability: P(a report's bucket is the true one), in (1/g, 1).
        grr: per marginal, whether its group reports with GRR over the marginal's cells (probability: the
            largest with epsilon at most local hashing's); default none.
    """

    name: ClassVar[str] = "calm"
    attributes: tuple[Attribute, ...]
    marginals: tuple[tuple[int, ...], ...]
    g: int
    truth_probability: float
    grr: tuple[bool, ...] = ()
    group_params: tuple[OLHParams | GRRParams, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        attrs = tuple((str(n), d if isinstance(d, Domain) else Domain.of(d)) for n, d in self.attributes)
        object.__setattr__(self, "attributes", attrs)
        if not 1 <= len(attrs) <= MAX_ATTRIBUTES:
            raise InvalidParameterError("attributes", len(attrs), f"1 to {MAX_ATTRIBUTES} attributes")
        names = [n for n, _ in attrs]
        for n, dom in attrs:
            if not _NAME.fullmatch(n):
                raise InvalidParameterError("attributes", n[:80], "names of 1-64 characters [A-Za-z0-9_.-]")
            for label in dom.labels or ():
                if _BAD_LABEL.search(label):
                    raise InvalidParameterError(f"attributes.{n}", label[:80], "labels without ; / = | + , :")
        if len(set(names)) != len(names):
            raise InvalidParameterError("attributes", ",".join(names)[:80], "distinct attribute names")
        joint = math.prod(d.size for _, d in attrs)
        if joint > MAX_CALM_JOINT:
            raise InvalidParameterError(
                "attributes", joint, f"a full joint of at most {MAX_CALM_JOINT} records"
            )
        margs = tuple(
            tuple(int_field("marginals", int(a), 0, len(attrs) - 1) for a in m) for m in self.marginals
        )
        object.__setattr__(self, "marginals", margs)
        if not 1 <= len(margs) <= MAX_MARGINALS:
            raise InvalidParameterError("marginals", len(margs), f"1 to {MAX_MARGINALS} marginals")
        for m in margs:
            if not m or list(m) != sorted(set(m)):
                raise InvalidParameterError(
                    "marginals", m, "non-empty sets of distinct attributes, increasing"
                )
        if len(set(margs)) != len(margs):
            raise InvalidParameterError("marginals", margs, "distinct marginals")
        int_field("g", self.g, 2, _oracle_math.MAX_LOCAL_HASH_BUCKETS)
        quantize_probability("truth_probability", self.truth_probability)
        grr = tuple(bool(x) for x in self.grr) or (False,) * len(margs)
        if len(grr) != len(margs):
            raise InvalidParameterError("grr", len(grr), f"one flag per marginal ({len(margs)})")
        object.__setattr__(self, "grr", grr)
        cells = [self.cells(i) for i in range(len(margs))]
        if sum(cells) > MAX_CALM_CELLS:
            raise InvalidParameterError("marginals", sum(cells), f"at most {MAX_CALM_CELLS} cells in all")
        olh_eps = OLHParams(domain=Domain.of(2), g=self.g, truth_probability=self.truth_probability).epsilon
        per: list[OLHParams | GRRParams] = []
        for i, c in enumerate(cells):
            if grr[i]:
                per.append(_grr_group(c, olh_eps, i))
            else:
                per.append(OLHParams(domain=Domain.of(c), g=self.g, truth_probability=self.truth_probability))
        object.__setattr__(self, "group_params", tuple(per))

    @classmethod
    def from_epsilon(
        cls,
        attributes: Sequence[tuple[str, Any]],
        marginals: Sequence[Sequence[int]],
        epsilon: float,
        *,
        g: int | None = None,
    ) -> CalmParams:
        """CALM at ``epsilon``: local hashing at ``epsilon`` (p rounded toward privacy), and GRR for every
        marginal whose cells make its variance lower (CALM's adaptive choice)."""
        eps = check_epsilon(epsilon)
        oracle = OLHParams.from_epsilon(2, eps, g=g)
        olh_var = oracle_variance(oracle.p_star, oracle.q_star)
        attrs = tuple((str(n), Domain.of(d)) for n, d in attributes)
        grr = []
        for m in marginals:
            c = math.prod(attrs[j][1].size for j in m)
            use = bool(grr_like_threshold(c, oracle.epsilon))
            if use:
                lp = _grr_group(c, oracle.epsilon, 0)
                use = oracle_variance(lp.p, lp.q) < olh_var
            grr.append(use)
        params = cls(
            attributes=attrs,
            marginals=tuple(tuple(sorted(m)) for m in marginals),
            g=oracle.g,
            truth_probability=oracle.truth_probability,
            grr=tuple(grr),
        )
        report_quantization(eps, params.epsilon)
        return params

    @property
    def epsilon(self) -> float:
        """The largest of the groups' epsilons (local hashing's when a group uses it)."""
        return max(lp.epsilon for lp in self.group_params)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.attributes)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(d.size for _, d in self.attributes)

    @property
    def joint_size(self) -> int:
        return math.prod(self.sizes)

    def cells(self, i: int) -> int:
        """c_{A_i}, the cells of marginal i (0-based)."""
        return math.prod(self.sizes[j] for j in self.marginals[i])

    def group_rates(self, i: int) -> tuple[float, float]:
        """(p*, q*) of group i's oracle (0-based)."""
        lp = self.group_params[i]
        return (lp.p, lp.q) if isinstance(lp, GRRParams) else (lp.p_star, lp.q_star)

    def bucket_bound(self, group: int) -> int:
        """Reported values of a group (1-based) are below this: its cells with GRR, g otherwise."""
        return self.cells(group - 1) if self.grr[group - 1] else self.g

    def full_group(self) -> int | None:
        """The 0-based marginal holding every attribute, or None."""
        full = tuple(range(len(self.attributes)))
        return self.marginals.index(full) if full in self.marginals else None

    def record_indices(self, record: object) -> tuple[int, ...]:
        """The per-attribute indices of a record: a mapping attribute -> value, or a sequence in attribute
        order.

        Raises:
            DomainError: an unknown or missing attribute, or a value outside an attribute's domain (named).
        """
        if isinstance(record, Mapping):
            unknown = [k for k in record if k not in self.names]
            if unknown:
                raise DomainError("record", str(unknown[0])[:80], f"attributes among {', '.join(self.names)}")
            missing = [n for n in self.names if n not in record]
            if missing:
                raise DomainError(
                    "record", missing[0], f"a value for every attribute ({', '.join(self.names)})"
                )
            values = [record[n] for n in self.names]
        elif isinstance(record, tuple | list):
            if len(record) != len(self.attributes):
                raise DomainError(
                    "record", len(record), f"{len(self.attributes)} values ({', '.join(self.names)})"
                )
            values = list(record)
        else:
            raise DomainError("record", type(record).__name__, "a mapping attribute -> value or a tuple")
        out = []
        for (name, dom), v in zip(self.attributes, values, strict=True):
            try:
                out.append(dom.index(v))
            except DomainError as exc:
                raise DomainError(f"record.{name}", exc.value, exc.allowed) from None
        return tuple(out)

    def cell_of(self, i: int, indices: Sequence[int]) -> int:
        """The cell of marginal i (0-based) holding a record of per-attribute ``indices``."""
        m = self.marginals[i]
        strides = _strides([self.sizes[j] for j in m])
        return sum(indices[j] * s for j, s in zip(m, strides, strict=True))

    def joint_indices(self, index: int) -> tuple[int, ...]:
        """Per-attribute indices of the record of joint index ``index`` (row-major)."""
        return tuple((index // s) % c for s, c in zip(_strides(self.sizes), self.sizes, strict=True))


def _grr_group(cells: int, epsilon: float, i: int) -> GRRParams:
    """GRR over ``cells`` with the largest probability whose epsilon is at most ``epsilon``."""
    t = grr_like_threshold(cells, epsilon)
    if t == 0:
        raise InvalidParameterError("grr", i, f"marginals whose GRR can reach epsilon {epsilon:.6g}")
    return GRRParams(domain=Domain.of(cells), truth_probability=threshold_to_probability(t))


def _attributes_text(params: CalmParams) -> str:
    parts = []
    for n, d in params.attributes:
        parts.append(f"{n}={'/'.join(d.labels) if d.labels is not None else d.size}")
    return ";".join(parts)


def _marginals_text(params: CalmParams) -> str:
    return ";".join("+".join(params.names[j] for j in m) for m in params.marginals)


def _make(*, epsilon: float | None, domain: object, fields: dict[str, object]) -> CalmParams:
    if domain is not None:
        raise InvalidParameterError(
            "domain", domain, "none for calm (its attributes are --param attributes=)"
        )
    if "attributes" not in fields or "marginals" not in fields:
        raise InvalidParameterError(
            "params",
            sorted(fields),
            "attributes=NAME=L1/L2;... and marginals=A+B;... (or all-pairs) for calm",
        )
    raw_attrs = fields.pop("attributes")
    attrs = parse_attributes(raw_attrs) if isinstance(raw_attrs, str) else tuple(raw_attrs)  # type: ignore[arg-type]
    names = [n for n, _ in attrs]
    raw_m = fields.pop("marginals")
    margs = parse_marginals(raw_m, names) if isinstance(raw_m, str) else tuple(raw_m)  # type: ignore[arg-type]
    g = take_field(fields, "g", int, "calm") if "g" in fields else None
    if epsilon is not None:
        no_more_fields(fields, "calm", ("attributes", "marginals", "g"))
        return CalmParams.from_epsilon(attrs, margs, epsilon, g=g)  # type: ignore[arg-type]
    tp = take_field(fields, "truth_probability", float, "calm") if "truth_probability" in fields else None
    grr_raw = fields.pop("grr", ())
    if isinstance(grr_raw, str):
        grr = tuple(x.strip() in ("1", "true", "True") for x in grr_raw.split(",") if x.strip())
    else:
        grr = tuple(bool(x) for x in grr_raw)  # type: ignore[attr-defined]
    no_more_fields(fields, "calm", _FIELDS)
    if tp is None or g is None:
        raise InvalidParameterError("params", sorted(fields), "epsilon, or g and truth_probability for calm")
    return CalmParams(
        attributes=attrs,
        marginals=margs,
        g=g,  # type: ignore[arg-type]
        truth_probability=tp,  # type: ignore[arg-type]
        grr=grr,
    )


def group_of(params: CalmParams, campaign_id: str, secret: ClientSecret) -> int:
    """The device's group in [1, m]: 1 + (first 8 bytes of HMAC-SHA256(secret, GROUP_LABEL || campaign
    id), big-endian) mod m. The modulo bias is below m / 2**64."""
    word = int.from_bytes(secret.prf(GROUP_LABEL + campaign_id.encode("utf-8"))[:8], "big")
    return 1 + word % len(params.marginals)


class CalmReport(NamedTuple):
    """One report: the device's group (1..m), local hashing's seed (a, b) and bucket (or GRR cell)."""

    group: int
    a: int
    b: int
    bucket: int


class CalmEncoder:
    """The device's encoder: its group is fixed (from its secret); each record is reported as its cell in
    the group's marginal, through GRR's or local hashing's per-report encoder (OS CSPRNG)."""

    __slots__ = ("_group", "_grr", "_olh", "params")

    def __init__(self, params: CalmParams, *, group: int) -> None:
        self.params = params
        self._group = int_field("group", group, 1, len(params.marginals))
        lp = params.group_params[group - 1]
        self._grr = GRREncoder(lp) if isinstance(lp, GRRParams) else None
        self._olh = None if isinstance(lp, GRRParams) else LocalHashEncoder(lp)

    def encode(self, record: object) -> CalmReport:
        cell = self.params.cell_of(self._group - 1, self.params.record_indices(record))
        if self._olh is None:
            assert self._grr is not None
            return CalmReport(self._group, 0, 0, self._grr.encode_index(cell))
        r = self._olh.encode_index(cell)
        return CalmReport(self._group, r.a, r.b, r.bucket)


# ------------------------------------------------------------------------------------------------ codec


def _report_value(field_name: str, report: object, params: CalmParams) -> tuple[int, int, int, int]:
    missing = object()
    parts = [getattr(report, name, missing) for name in ("group", "a", "b", "bucket")]
    if any(p is missing for p in parts):
        raise InvalidReportError(field_name, report, "a CalmReport(group, a, b, bucket)")
    m = len(params.marginals)
    group = as_int(f"{field_name}.group", parts[0], f"a group in [1, {m}]")
    if not 1 <= group <= m:
        raise InvalidReportError(f"{field_name}.group", group, f"a group in [1, {m}]")
    a, b = check_seed(field_name, parts[1], parts[2])
    bound = params.bucket_bound(group)
    y = as_int(f"{field_name}.bucket", parts[3], f"a bucket in [0, {bound - 1}]")
    if not 0 <= y < bound:
        raise InvalidReportError(f"{field_name}.bucket", y, f"a bucket in [0, {bound - 1}]")
    if params.grr[group - 1] and (a or b):
        raise InvalidReportError(f"{field_name}.a", a, f"0 (no seed) in GRR group {group}")
    return group, a, b, y


def _pack_row(r: CalmReport) -> bytes:
    return pack_level_row(*r)


def _unpack_row(row: bytes) -> CalmReport:
    return CalmReport(*unpack_level_row(row))


def _check_values(groups: Any, a: Any, b: Any, y: Any, params: CalmParams, field_name: str) -> None:
    """Groups in [1, m], each bucket below its group's bound, no seed in a GRR group (vectorised)."""
    import numpy as np

    m = len(params.marginals)
    g = np.asarray(groups, dtype=np.int64)
    if g.size and (int(g.min()) < 1 or int(g.max()) > m):
        bad = int(g.min()) if int(g.min()) < 1 else int(g.max())
        raise InvalidReportError(f"{field_name}.groups", bad, f"groups in [1, {m}]")
    bounds = np.array([0, *(params.bucket_bound(i) for i in range(1, m + 1))], dtype=np.int64)
    yy = np.asarray(y, dtype=np.int64)
    over = yy >= bounds[g]
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise InvalidReportError(
            f"{field_name}.buckets", int(yy[i]), f"a bucket in [0, {bounds[g[i]] - 1}] in group {int(g[i])}"
        )
    grr = np.array([False, *params.grr])
    seeded = grr[g] & ((np.asarray(a) != 0) | (np.asarray(b) != 0))
    if seeded.any():
        i = int(np.flatnonzero(seeded)[0])
        raise InvalidReportError(f"{field_name}.a", int(a[i]), f"0 (no seed) in GRR group {int(g[i])}")


def _check_columns(columns: object, params: CalmParams, field_name: str) -> tuple[Any, Any, Any, Any]:
    import numpy as np

    if not isinstance(columns, tuple) or len(columns) != 4:
        raise InvalidReportError(
            field_name, type(columns).__name__, "a (groups, a, b, buckets) tuple of arrays"
        )
    groups, a, b, y = (np.asarray(c) for c in columns)
    n = groups.shape[0] if groups.ndim == 1 else -1
    for name, arr in (("a", a), ("b", b)):
        if arr.dtype != np.uint64 or arr.shape != (n,):
            raise InvalidReportError(
                f"{field_name}.{name}", f"{arr.dtype}{arr.shape}", f"uint64 of shape ({n},)"
            )
    for name, arr in (("groups", groups), ("buckets", y)):
        if not np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_ or arr.shape != (n,):
            raise InvalidReportError(
                f"{field_name}.{name}", f"{arr.dtype}{arr.shape}", f"integers of shape ({n},)"
            )
    if y.size and int(y.min()) < 0:
        raise InvalidReportError(f"{field_name}.buckets", int(y.min()), "non-negative buckets")
    _check_values(groups, a, b, y, params, field_name)
    return groups, a, b, y


# ------------------------------------------------------------------------------------------------- spec


class CalmSpec(MechanismSpec[CalmParams]):
    """CALM for every layer (:mod:`ldp_client.spec`; module docstring).

    Wire: ``Campaign.calm`` (``CalmParams``); batch columns ``groups`` (u16), ``a``, ``b`` (u64),
    ``buckets`` (u32) of ``ReportBatch.calm``; ``Report.calm`` one (group, a, b, bucket). Journal row: u16
    group, u64 a, u64 b, u32 bucket. Accumulator: ``support`` of sum_i c_{A_i} cell counts and m group
    counts. Items: the full joint's records; marginals through :meth:`marginal_tables`.
    """

    name: ClassVar[str] = CalmParams.name
    params_type: ClassVar[type[Any]] = CalmParams
    kind: ClassVar[Kind] = Kind.SUPPORT
    wire: ClassVar[WireNames] = WireNames(campaign="calm", batch="calm", report="calm")
    takes_domain: ClassVar[bool] = False
    per_device_state: ClassVar[bool] = True  # the group comes from the client secret: one client per user
    epsilon_field: ClassVar[str | None] = "truth_probability"

    def make(self, *, epsilon: float | None, domain: Any, fields: dict[str, object]) -> CalmParams:
        return _make(epsilon=epsilon, domain=domain, fields=dict(fields))

    def make_args(self, params: CalmParams) -> MakeArgs:
        return MakeArgs(
            fields={
                "attributes": _attributes_text(params),
                "marginals": _marginals_text(params),
                "g": params.g,
                "truth_probability": params.truth_probability,
                "grr": ",".join("1" if x else "0" for x in params.grr),
            },
        )

    def params_to_proto(self, params: CalmParams) -> campaign_pb2.CalmParams:
        return campaign_pb2.CalmParams(
            attributes=[
                campaign_pb2.CalmAttribute(name=n, domain=domain_to_proto(d)) for n, d in params.attributes
            ],
            marginals=[campaign_pb2.CalmMarginal(attributes=list(m)) for m in params.marginals],
            g=params.g,
            truth_probability=params.truth_probability,
            grr=list(params.grr),
        )

    def params_from_proto(self, msg: campaign_pb2.CalmParams) -> CalmParams:
        return CalmParams(
            attributes=tuple((a.name, domain_from_proto(a.domain)) for a in msg.attributes),
            marginals=tuple(tuple(m.attributes) for m in msg.marginals),
            g=msg.g,
            truth_probability=msg.truth_probability,
            grr=tuple(msg.grr),
        )

    def report_bits(self, params: CalmParams) -> int:
        """16 bits of group plus the largest group report: 128 seed bits and the bucket, or a GRR cell."""
        m = len(params.marginals)
        buckets = max(_oracle_math.ceil_log2(params.bucket_bound(i)) for i in range(1, m + 1))
        return 16 + (0 if all(params.grr) else 128) + buckets

    def needs_secret(self, params: CalmParams) -> bool:
        return True

    def encoder(
        self, params: CalmParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        if secret is None:
            raise InvalidParameterError(
                "secret", None, "the device's client secret (calm derives its group from it)"
            )
        key = secret if not callable(secret) else secret()
        return CalmEncoder(params, group=group_of(params, campaign_id, key)).encode

    # -------------------------------------------------------------------------------- codec

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: CalmParams, columns: Any) -> None:
        groups, a, b, y = _check_columns(columns, params, self.wire.batch)
        n = groups.shape[0]
        check_count("count", n)
        msg.count = n
        cols = msg.calm
        cols.groups = groups.astype(_U16_LE).tobytes()
        cols.a = a.astype(U64_LE).tobytes()
        cols.b = b.astype(U64_LE).tobytes()
        cols.buckets = y.astype(U32_LE).tobytes()

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: CalmParams, n: int) -> Any:
        import numpy as np

        f, cols = self.wire.batch, msg.calm
        check_length(f"{f}.groups", cols.groups, 2 * n, f"2 * count for count={n} little-endian uint16")
        check_length(f"{f}.a", cols.a, 8 * n, f"8 * count for count={n} little-endian uint64")
        check_length(f"{f}.b", cols.b, 8 * n, f"8 * count for count={n} little-endian uint64")
        check_length(f"{f}.buckets", cols.buckets, 4 * n, f"4 * count for count={n} little-endian uint32")
        groups = np.frombuffer(cols.groups, dtype=_U16_LE)
        buckets = np.frombuffer(cols.buckets, dtype=U32_LE)
        a = np.frombuffer(cols.a, dtype=U64_LE).astype(np.uint64, copy=False)
        b = np.frombuffer(cols.b, dtype=U64_LE).astype(np.uint64, copy=False)
        _check_values(groups, a, b, buckets, params, f)
        return groups.astype(np.uint16, copy=False), a, b, buckets.astype(np.uint32, copy=False)

    def report_to_proto(self, msg: reports_pb2.Report, params: CalmParams, output: Any) -> None:
        group, a, b, y = _report_value("report", output, params)
        target = msg.calm
        target.group, target.a, target.b, target.bucket = group, a, b, y

    def report_from_proto(self, msg: reports_pb2.Report, params: CalmParams) -> Any:
        return level_columns([_report_value("calm", msg.calm, params)])

    def batch_from_reports(self, params: CalmParams, reports: Sequence[Any]) -> Any:
        return level_columns([_report_value(f"reports[{i}]", r, params) for i, r in enumerate(reports)])

    def row_fields(self, params: CalmParams) -> tuple[RowField, ...]:
        return level_row_fields(self.wire.batch, "groups")

    def row_packer(self, params: CalmParams) -> Callable[[Any], bytes]:
        return _pack_row

    def row_unpacker(self, params: CalmParams) -> Callable[[bytes], Any]:
        return _unpack_row

    # --------------------------------------------------------------------------- simulation

    def encode_batch(
        self,
        params: CalmParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        """Simulated users (seeded ``rng`` only), ``values`` their records' joint indices (row-major): a
        uniform group each (what their secrets give), then the group's oracle on the record's cell: one
        vectorised call per group, none per report."""
        import numpy as np

        idx = np.asarray(values)
        d = params.joint_size
        if idx.ndim != 1 or (idx.size and (int(idx.min()) < 0 or int(idx.max()) >= d)):
            raise DomainError("values", f"shape {idx.shape}", f"a 1-D array of joint indices in [0, {d - 1}]")
        idx = idx.astype(np.int64, copy=False)
        n = idx.shape[0]
        m = len(params.marginals)
        groups = rng.integers(1, m + 1, size=n, dtype=np.int64)
        a = np.zeros(n, dtype=np.uint64)
        b = np.zeros(n, dtype=np.uint64)
        y = np.zeros(n, dtype=np.uint32)
        cell_maps = _cell_maps(params)
        for i, lp in enumerate(params.group_params):
            rows = np.flatnonzero(groups == i + 1)
            cells = cell_maps[i][idx[rows]]
            if isinstance(lp, GRRParams):
                y[rows] = GRREncoder(lp).encode_batch(cells, rng)
            else:
                a[rows], b[rows], y[rows] = LocalHashEncoder(lp).encode_batch(cells, rng)
        return groups.astype(np.uint16), a, b, y

    # ------------------------------------------------------------------------------- server

    def layout(self, params: CalmParams) -> Layout:
        m = len(params.marginals)
        return Layout.support(sum(params.cells(i) for i in range(m)) + m)

    def layout_batch(self, params: CalmParams, columns: Any) -> Any:
        """(n, support): per group, a bincount of the reported cells (GRR) or local hashing's vectorised
        support test over the marginal's cells, then the reports of each group."""
        import numpy as np

        groups, a, b, y = _check_columns(columns, params, "reports")
        parts = []
        for i, lp in enumerate(params.group_params):
            rows = groups == i + 1
            if isinstance(lp, GRRParams):
                parts.append(np.bincount(np.asarray(y[rows], dtype=np.int64), minlength=lp.domain.size))
            else:
                parts.append(local_hash_support(a[rows], b[rows], y[rows], lp))
        per = np.bincount(np.asarray(groups, dtype=np.int64), minlength=len(params.marginals) + 1)[1:]
        return int(groups.shape[0]), np.concatenate([*parts, per]).astype(np.int64)

    def items(self, params: CalmParams) -> tuple[str, ...]:
        """The full joint's records, row-major, each its labels joined by ``|``."""
        doms = [d for _, d in params.attributes]
        return tuple("|".join(p) for p in itertools.product(*(_labels(d) for d in doms)))

    def input_value(self, params: CalmParams, index: int) -> Any:
        doms = [d for _, d in params.attributes]
        return tuple(d.value(i) for d, i in zip(doms, params.joint_indices(index), strict=True))

    def item_table(self, params: CalmParams) -> bool:
        return params.full_group() is not None

    def support_rates(self, params: CalmParams) -> tuple[float, float]:
        full = params.full_group()
        m = len(params.marginals)
        p_star, q_star = params.group_rates(full if full is not None else 0)
        return p_star / m, q_star / m

    def support(self, params: CalmParams, acc: Any, candidates: Sequence[str] = ()) -> Support:
        """The full joint from the full set's group, at the whole population's rates p*/m, q*/m.

        Raises:
            InvalidParameterError: the campaign chose no marginal of every attribute.
        """
        full = params.full_group()
        if full is None:
            raise InvalidParameterError(
                "items",
                params.name,
                "a campaign whose marginals include the full attribute set (ask marginals)",
            )
        p_star, q_star = self.support_rates(params)
        start = sum(params.cells(i) for i in range(full))
        counts = acc.support[start : start + params.cells(full)]
        return Support(labels=self.items(params), counts=counts, n=acc.n, p_star=p_star, q_star=q_star)

    def marginal_tables(self, params: CalmParams, acc: Any) -> MarginalTables:
        m = len(params.marginals)
        counts, start = [], 0
        for i in range(m):
            counts.append(acc.support[start : start + params.cells(i)])
            start += params.cells(i)
        rates = [params.group_rates(i) for i in range(m)]
        return MarginalTables(
            attributes=params.names,
            labels=tuple(_labels(d) for _, d in params.attributes),
            marginals=params.marginals,
            counts=tuple(counts),
            reports=tuple(int(c) for c in acc.support[start : start + m]),
            n=int(acc.n),
            p_star=tuple(r[0] for r in rates),
            q_star=tuple(r[1] for r in rates),
            grr=params.grr,
        )

    # ------------------------------------------------------------------------------- checks

    def examples(self) -> tuple[CalmParams, ...]:
        two = (("a", Domain.of(2)), ("b", Domain.of(("x", "y", "z"))))
        return (
            CalmParams(attributes=two, marginals=((0, 1), (0,)), g=2, truth_probability=0.75),
            CalmParams.from_epsilon(two, ((0, 1), (1,)), math.log(3.0), g=4),
            CalmParams(
                attributes=(*two, ("c", Domain.of(2))),
                marginals=((0, 1, 2), (0, 1), (1, 2)),
                g=4,
                truth_probability=0.5,
                grr=(False, True, False),
            ),
        )

    def largest(self) -> tuple[CalmParams, ...]:
        attrs = tuple((f"a{i}", Domain.of(2)) for i in range(MAX_ATTRIBUTES))
        return (
            CalmParams(
                attributes=attrs,
                marginals=tuple(itertools.combinations(range(MAX_ATTRIBUTES), 2))[:MAX_MARGINALS],
                g=2,
                truth_probability=0.75,
            ),
        )

    def exact_outputs(self, params: CalmParams, value: Any) -> Mapping[Hashable, Fraction]:
        """The group uniform on 1..m (a uniformly random secret), then the group's oracle on the record's
        cell: GRR's exact channel, or local hashing conditioned on each marginal's balanced seed sample
        (:func:`ldp_client.mechanisms.olh.balanced_seeds`)."""
        indices = params.record_indices(value)
        m = len(params.marginals)
        out: dict[Hashable, Fraction] = {}
        for i, lp in enumerate(params.group_params):
            cell = params.cell_of(i, indices)
            if isinstance(lp, GRRParams):
                row = exact_channel(lp)[cell]
                out.update({CalmReport(i + 1, 0, 0, y): pr / m for y, pr in enumerate(row)})
                continue
            seeds = balanced_seeds(lp.domain.size, params.g)
            weight = Fraction(1, m * len(seeds))
            for a, b in seeds:
                for y in range(params.g):
                    out[CalmReport(i + 1, a, b, y)] = weight * exact_report_probability(lp, cell, a, b, y)
        return out

    def exact_output_probability(self, params: CalmParams, value: Any, output: Any) -> Fraction:
        m = len(params.marginals)
        if not isinstance(output, CalmReport) or not 1 <= output.group <= m:
            return Fraction(0)
        if not 0 <= output.bucket < params.bucket_bound(output.group):
            return Fraction(0)
        lp = params.group_params[output.group - 1]
        cell = params.cell_of(output.group - 1, params.record_indices(value))
        if isinstance(lp, GRRParams):
            if output.a or output.b:
                return Fraction(0)
            return exact_channel(lp)[cell][output.bucket] / m
        return Fraction(1, m) * exact_report_probability(lp, cell, output.a, output.b, output.bucket)


def _labels(dom: Domain) -> tuple[str, ...]:
    return tuple(dom.label(i) for i in range(dom.size))


def _cell_maps(params: CalmParams) -> list[NDArray[np.int64]]:
    """Per marginal, the cell of every joint index (row-major), as an index array of the joint's size."""
    import numpy as np

    sizes = params.sizes
    grids = np.indices(sizes).reshape(len(sizes), -1)
    out = []
    for m in params.marginals:
        strides = _strides([sizes[j] for j in m])
        out.append(
            sum((grids[j] * s for j, s in zip(m, strides, strict=True)), np.zeros(grids.shape[1], np.int64))
        )
    return out


SPEC = CalmSpec()
"""CALM marginals, as :mod:`ldp_client.registry` lists it."""
