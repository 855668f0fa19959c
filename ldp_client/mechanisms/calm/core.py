"""CALM parameters, records, the device's group and its encoder (:mod:`ldp_client.mechanisms.calm`)."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from ldp_client import _oracle_math
from ldp_client._oracle_math import grr_like_threshold, oracle_variance
from ldp_client._prob import quantize_probability, threshold_to_probability
from ldp_client.domain import (
    Domain,
    check_epsilon,
    int_field,
    no_more_fields,
    report_quantization,
    take_field,
)
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.mechanisms.grr import GRREncoder, GRRParams
from ldp_client.mechanisms.olh import (
    LocalHashEncoder,
    OLHParams,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ldp_client.secret import ClientSecret

__all__ = [
    "GROUP_LABEL",
    "MAX_ATTRIBUTES",
    "MAX_CALM_CELLS",
    "MAX_CALM_JOINT",
    "MAX_MARGINALS",
    "CalmEncoder",
    "CalmParams",
    "CalmReport",
    "attributes_text",
    "cell_maps",
    "domain_labels",
    "group_of",
    "make_params",
    "marginals_text",
    "parse_attributes",
    "parse_marginals",
]

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


def attributes_text(params: CalmParams) -> str:
    parts = []
    for n, d in params.attributes:
        parts.append(f"{n}={'/'.join(d.labels) if d.labels is not None else d.size}")
    return ";".join(parts)


def marginals_text(params: CalmParams) -> str:
    return ";".join("+".join(params.names[j] for j in m) for m in params.marginals)


def make_params(*, epsilon: float | None, domain: object, fields: dict[str, object]) -> CalmParams:
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


def domain_labels(dom: Domain) -> tuple[str, ...]:
    return tuple(dom.label(i) for i in range(dom.size))


def cell_maps(params: CalmParams) -> list[NDArray[np.int64]]:
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
