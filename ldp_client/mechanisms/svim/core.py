"""SVIM's parameters, device encoder and seeded batch encoder (set-valued item and itemset mining).

Wang, Li, Jha, "Locally Differentially Private Frequent Itemset Mining", IEEE S&P 2018 (SVSM for items,
SVIM for itemsets; padding-and-sampling frequency oracle PSFO). A campaign is one *stage*:

* ``items``: the devices' sets of items of a declared domain of d items; the estimated values are the d
  items;
* ``itemsets``: m candidate itemsets (subsets of the items, of size >= 2, built by the server from an
  items campaign's top items: ``ldp-aggregator campaign follow-up --mechanism svim``); a device's "set"
  is the list C(S) of the candidates contained in its set of items S.

Devices are split into disjoint groups by their client secret: slot = (first 8 bytes of
HMAC-SHA256(secret, GROUP_LABEL || group key), big-endian) mod 1000, the group key being shared by an items
campaign and its follow-up (the items campaign's id by default). A stage owns the slots
[stage_lo, stage_hi); a device of another slot sends it nothing (its encoder refuses, so each user reports
once, to one stage). Within the stage the first ``size_share`` slots form the *size group*, which reports
its size s = |S| (items) or |C(S)| (itemsets), capped at ``size_cap``, with GRR over 0..size_cap; the other
slots form the *PS group*, which reports by padding and sampling (PSFO): with k = s elements and L =
``max_items``, a slot j uniform on [0, max(k, L)) picks element j if j < k, else the dummy m + j, and the
pick is reported with the inner oracle (GRR or OLH, PSFO's adaptive choice) over the extended domain
[0, m + L). A user with more than L elements reports each w.p. 1/k (the paper samples L of them, then one
of the L), so its count is under-estimated by L/k; the server's correction uses the size group's estimated
size distribution (:mod:`ldp_aggregator.itemsets`).

Privacy: the slot is independent of the set; the size report is GRR with epsilon at most the inner
oracle's; the PS report is a mixture over the sampled element of epsilon-LDP laws: every report is
epsilon-LDP with epsilon the inner oracle's. Each device sends one report (``reports_per_device``).

Batch input (simulation): an integer matrix (n, w) whose row r lists user r's items, -1 in unused slots.

Importing this module does not import numpy.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, NamedTuple

from ldp_client import _oracle_math
from ldp_client import randomness as _rnd
from ldp_client._oracle_math import grr_like_threshold
from ldp_client._prob import threshold_to_probability
from ldp_client.domain import Domain, DomainLike, check_epsilon, int_field, report_quantization
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.mechanisms.grr import GRREncoder, GRRParams
from ldp_client.mechanisms.olh import LocalHashEncoder, OLHParams

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

    from ldp_client.secret import ClientSecret

__all__ = [
    "GROUP_LABEL",
    "ITEMS",
    "ITEMSETS",
    "SLOTS",
    "SVIMEncoder",
    "SVIMParams",
    "SVIMReport",
    "device_slot",
    "encode_sets",
    "itemset_label",
]

GROUP_LABEL: Final = b"ldp-svim-group\x00"
"""The HMAC message prefix of a device's slot (followed by the group key, UTF-8)."""
SLOTS: Final = 1000
"""Devices are split into 1000 slots (per mille of the population)."""
ITEMS: Final = "items"
ITEMSETS: Final = "itemsets"
STAGES: Final = (ITEMS, ITEMSETS)
MAX_SVIM_ITEMS: Final = 1 << 14
"""Bound on d (items) and on m (candidate itemsets): an estimate lists them in one message."""
MAX_PADDING: Final = 1024
MAX_ITEMSET_SIZE: Final = 16
MAX_GROUP_KEY: Final = 128
_BLOCK: Final = 1 << 16
SIZE_GROUP: Final = 0
PS_GROUP: Final = 1
_INNER_NAMES: Final = ("auto", "grr", "olh")


def itemset_label(domain: Domain, itemset: Sequence[int]) -> str:
    """The label of an itemset: its items' labels joined by ``+`` (in domain order)."""
    return "+".join(domain.label(i) for i in itemset)


def _check_candidates(domain: Domain, candidates: object) -> tuple[tuple[int, ...], ...]:
    """Candidate itemsets as sorted tuples of item indices: each of 2..16 distinct items of the domain, the
    itemsets distinct, 1..MAX_SVIM_ITEMS of them."""
    if not isinstance(candidates, Iterable) or isinstance(candidates, str | bytes):
        raise InvalidParameterError("candidates", candidates, "a sequence of itemsets (tuples of items)")
    out: list[tuple[int, ...]] = []
    seen: set[tuple[int, ...]] = set()
    d = domain.size
    for j, itemset in enumerate(candidates):
        if not isinstance(itemset, Iterable) or isinstance(itemset, str | bytes):
            raise InvalidParameterError(f"candidates[{j}]", itemset, "a tuple of item indices")
        items = list(itemset)
        for x in items:
            if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < d:
                raise InvalidParameterError(
                    f"candidates[{j}]", x, f"items of the item domain: indices in [0, {d - 1}]"
                )
        key = tuple(sorted(set(items)))
        if len(key) != len(items) or not 2 <= len(key) <= MAX_ITEMSET_SIZE:
            raise InvalidParameterError(
                f"candidates[{j}]", items, f"2 to {MAX_ITEMSET_SIZE} distinct items (an itemset of size >= 2)"
            )
        if key in seen:
            raise InvalidParameterError(f"candidates[{j}]", itemset_label(domain, key), "distinct itemsets")
        seen.add(key)
        out.append(key)
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class SVIMParams:
    """One stage of SVIM (module docstring; Wang, Li, Jha, S&P 2018).

    Attributes:
        domain: the d items (a size or labels), 2 <= d <= 2^14.
        stage: ``items`` or ``itemsets``.
        candidates: itemsets stage: the m candidate itemsets (sorted item-index tuples of size 2..16);
            items stage: empty.
        max_items: L, the padding length of PSFO, 1 <= L <= 1024.
        size_cap: the size group reports min(size, size_cap) over 0..size_cap, 1 <= size_cap <= 1024.
        inner: the PS group's oracle over the extended domain of size m + L (GRR, or OLH without labels).
        group_key: the key of the device split shared by a campaign and its follow-up ("" = this
            campaign's id).
        stage_lo, stage_hi: the slots [lo, hi) of the stage, 0 <= lo < hi <= 1000.
        size_share: slots [lo, lo + size_share) report their size, 0 <= size_share < hi - lo.
    """

    name: ClassVar[str] = "svim"
    domain: Domain
    stage: str = ITEMS
    candidates: tuple[tuple[int, ...], ...] = ()
    max_items: int
    size_cap: int
    inner: GRRParams | OLHParams
    group_key: str = ""
    stage_lo: int = 0
    stage_hi: int = SLOTS
    size_share: int = 50
    size_oracle: GRRParams = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.domain, Domain):
            object.__setattr__(self, "domain", Domain.of(self.domain))
        d = self.domain.size
        if not 2 <= d <= MAX_SVIM_ITEMS:
            raise InvalidParameterError("domain", d, f"2 to {MAX_SVIM_ITEMS} items")
        if self.stage not in STAGES:
            raise InvalidParameterError("stage", self.stage, "items or itemsets")
        object.__setattr__(self, "candidates", _check_candidates(self.domain, self.candidates))
        m = len(self.candidates)
        if self.stage == ITEMS and m:
            raise InvalidParameterError("candidates", m, "none for stage items (its values are the items)")
        if self.stage == ITEMSETS and not 1 <= m <= MAX_SVIM_ITEMS:
            raise InvalidParameterError(
                "candidates", m, f"1 to {MAX_SVIM_ITEMS} candidate itemsets for stage itemsets"
            )
        int_field("max_items", self.max_items, 1, MAX_PADDING)
        int_field("size_cap", self.size_cap, 1, MAX_PADDING)
        if not isinstance(self.group_key, str) or len(self.group_key) > MAX_GROUP_KEY:
            raise InvalidParameterError("group_key", self.group_key, f"a string of at most {MAX_GROUP_KEY}")
        int_field("stage_lo", self.stage_lo, 0, SLOTS - 1)
        int_field("stage_hi", self.stage_hi, self.stage_lo + 1, SLOTS)
        int_field("size_share", self.size_share, 0, self.stage_hi - self.stage_lo - 1)
        size = self.values + self.max_items
        if not isinstance(self.inner, GRRParams | OLHParams) or type(self.inner) not in (
            GRRParams,
            OLHParams,
        ):
            raise InvalidParameterError("inner", type(self.inner).__name__, "the parameters of grr or olh")
        if self.inner.domain.size != size or self.inner.domain.labels is not None:
            raise InvalidParameterError(
                "inner.domain", self.inner.domain.size, f"the extended domain of size m + max_items = {size}"
            )
        t = grr_like_threshold(self.size_cap + 1, self.inner.epsilon)
        if t == 0:
            raise InvalidParameterError(
                "size_cap", self.size_cap, f"a size range GRR can cover at epsilon {self.inner.epsilon:.6g}"
            )
        oracle = GRRParams(domain=Domain.of(self.size_cap + 1), truth_probability=threshold_to_probability(t))
        object.__setattr__(self, "size_oracle", oracle)

    # ---------------------------------------------------------------------------------- derived

    @property
    def values(self) -> int:
        """m: the estimated values (d items, or the candidate itemsets)."""
        return self.domain.size if self.stage == ITEMS else len(self.candidates)

    @property
    def epsilon(self) -> float:
        """The inner oracle's epsilon (the size oracle's is at most it)."""
        return max(self.inner.epsilon, self.size_oracle.epsilon)

    @property
    def ps_share(self) -> float:
        """pi: the share of the stage's devices in the PS group, (hi - lo - size_share) / (hi - lo)."""
        width = self.stage_hi - self.stage_lo
        return (width - self.size_share) / width

    def inner_rates(self) -> tuple[float, float]:
        """(p, q) of the inner oracle (GRR's p and (1-p)/(m+L-1); OLH's p* and q*)."""
        if isinstance(self.inner, GRRParams):
            return self.inner.p, self.inner.q
        return self.inner.p_star, self.inner.q_star

    def ps_rates(self) -> tuple[float, float]:
        """PSFO's support rates in the PS group: p* = q + (p - q)/L for a holder (whose set has at most L
        elements), q* = q otherwise."""
        p, q = self.inner_rates()
        return q + (p - q) / self.max_items, q

    def labels(self) -> tuple[str, ...]:
        """The estimated values' labels: the items, or the itemsets as ``a+b``."""
        if self.stage == ITEMS:
            return tuple(self.domain.label(i) for i in range(self.domain.size))
        return tuple(itemset_label(self.domain, c) for c in self.candidates)

    def group_of_slot(self, slot: int) -> int | None:
        """The group of a device slot: SIZE_GROUP, PS_GROUP, or None (another stage's device)."""
        if not self.stage_lo <= slot < self.stage_hi:
            return None
        return SIZE_GROUP if slot < self.stage_lo + self.size_share else PS_GROUP

    def elements(self, items: Sequence[int]) -> list[int]:
        """The PS elements of a user holding ``items`` (indices): the items themselves (stage items) or the
        indices of the candidate itemsets contained in them (stage itemsets)."""
        if self.stage == ITEMS:
            return list(items)
        held = set(items)
        return [j for j, c in enumerate(self.candidates) if held.issuperset(c)]

    @classmethod
    def from_epsilon(
        cls,
        domain: DomainLike,
        epsilon: float,
        *,
        max_items: int,
        stage: str = ITEMS,
        candidates: Sequence[Sequence[int]] = (),
        size_cap: int | None = None,
        inner: str = "auto",
        group_key: str = "",
        stage_lo: int | None = None,
        stage_hi: int | None = None,
        size_share: int = 50,
    ) -> SVIMParams:
        """SVIM's stage at ``epsilon``. ``inner`` = auto takes PSFO's adaptive choice: GRR when its
        variance over the m + L values is below OLH's (m + L < 3 e^eps + 2), else OLH with the optimal g;
        ``size_cap`` defaults to 2 L; the slots default to an even split (our default), [0, 500) for items
        and [500, 1000) for itemsets."""
        eps = check_epsilon(epsilon)
        dom = Domain.of(domain)
        int_field("max_items", max_items, 1, MAX_PADDING)
        m = dom.size if stage == ITEMS else len(candidates)
        size = max(2, m + max_items)
        if inner not in _INNER_NAMES:
            raise InvalidParameterError("inner", inner, "auto, grr or olh")
        if inner == "auto":
            olh = OLHParams.from_epsilon(size, eps)
            grr_t = grr_like_threshold(size, eps)
            use_grr = grr_t > 0 and _oracle_math.oracle_variance(
                *_grr_rates(size, grr_t)
            ) <= _oracle_math.oracle_variance(olh.p_star, olh.q_star)
            chosen: GRRParams | OLHParams = GRRParams.from_epsilon(size, eps) if use_grr else olh
        elif inner == "grr":
            chosen = GRRParams.from_epsilon(size, eps)
        else:
            chosen = OLHParams.from_epsilon(size, eps)
        params = cls(
            domain=dom,
            stage=stage,
            candidates=tuple(tuple(c) for c in candidates),
            max_items=max_items,
            size_cap=size_cap if size_cap is not None else min(MAX_PADDING, 2 * max_items),
            inner=chosen,
            group_key=group_key,
            stage_lo=stage_lo if stage_lo is not None else (0 if stage == ITEMS else SLOTS // 2),
            stage_hi=stage_hi if stage_hi is not None else (SLOTS // 2 if stage == ITEMS else SLOTS),
            size_share=size_share,
        )
        report_quantization(eps, params.epsilon)
        return params


def _grr_rates(size: int, threshold: int) -> tuple[float, float]:
    p = threshold_to_probability(threshold)
    return p, (1.0 - p) / (size - 1)


def device_slot(params: SVIMParams, campaign_id: str, secret: ClientSecret) -> int:
    """The device's slot in [0, 1000): HMAC-SHA256(secret, GROUP_LABEL || group key), first 8 bytes
    big-endian, mod 1000 (the group key: ``params.group_key``, or ``campaign_id`` when it is empty). The
    modulo bias is below 1000 / 2**64."""
    key = params.group_key or campaign_id
    return int.from_bytes(secret.prf(GROUP_LABEL + key.encode("utf-8"))[:8], "big") % SLOTS


class SVIMReport(NamedTuple):
    """One report: the group (0 size, 1 PS), local hashing's seed (a, b; 0 for GRR) and the bucket (the
    size, the GRR value or the hash bucket)."""

    group: int
    a: int
    b: int
    bucket: int


class SVIMEncoder:
    """A device's encoder in its group (from its slot): each report draws from the OS CSPRNG."""

    __slots__ = ("_group", "_inner", "_size", "params")

    def __init__(self, params: SVIMParams, *, group: int) -> None:
        self.params = params
        self._group = int_field("group", group, SIZE_GROUP, PS_GROUP)
        self._size = GRREncoder(params.size_oracle)
        self._inner = (
            GRREncoder(params.inner)
            if isinstance(params.inner, GRRParams)
            else LocalHashEncoder(params.inner)
        )

    def items_of(self, values: Iterable[str | int]) -> list[int]:
        """Validate a user's set: indices of distinct items of the domain, at least one.

        Raises:
            DomainError: not an iterable of items (a str is one item, not a set), an item outside the
                domain, a repeated item, or an empty set.
        """
        if isinstance(values, str | bytes) or not isinstance(values, Iterable):
            raise DomainError("values", values, "a set or sequence of items of the domain")
        index = self.params.domain.index
        items = [index(v, "values") for v in values]
        if not items:
            raise DomainError("values", "<empty set>", "a set of at least one item of the domain")
        if len(set(items)) != len(items):
            raise DomainError("values", sorted(items), "distinct items (one is repeated)")
        return items

    def encode(self, values: Iterable[str | int]) -> SVIMReport:
        """Randomize one user's set (module docstring): its size (size group) or one sampled element by
        PSFO (PS group).

        Raises:
            DomainError: see :meth:`items_of`.
        """
        p = self.params
        elements = p.elements(self.items_of(values))
        k = len(elements)
        if self._group == SIZE_GROUP:
            return SVIMReport(SIZE_GROUP, 0, 0, self._size.encode_index(min(k, p.size_cap)))
        width = max(k, p.max_items)
        slot = _rnd.uniform_below(width, int.from_bytes(_rnd._source(4), "little"))
        element = elements[slot] if slot < k else p.values + slot
        if isinstance(self._inner, GRREncoder):
            return SVIMReport(PS_GROUP, 0, 0, self._inner.encode_index(element))
        r = self._inner.encode_index(element)
        return SVIMReport(PS_GROUP, r.a, r.b, r.bucket)


# ------------------------------------------------------------------------------------ batch (numpy)


def _check_sets(params: SVIMParams, sets: ArrayLike) -> NDArray[np.int64]:
    import numpy as np

    arr = np.asarray(sets)
    d = params.domain.size
    if arr.ndim != 2 or arr.shape[1] < 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise DomainError(
            "sets", f"<array of shape {arr.shape}, dtype {arr.dtype}>", "an integer matrix (n, w)"
        )
    vals = arr.astype(np.int64, copy=False)
    if vals.size:
        lo, hi = int(vals.min()), int(vals.max())
        if lo < -1 or hi >= d:
            raise DomainError(
                "sets", lo if lo < -1 else hi, f"items in [0, {d - 1}], or -1 for an empty slot"
            )
        srt = np.sort(vals, axis=1)
        dup = (srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)
        if dup.any():
            row = int(np.argmax(dup.any(axis=1)))
            raise DomainError(f"sets[{row}]", vals[row].tolist(), "distinct items in each row")
        empty = (vals < 0).all(axis=1)
        if empty.any():
            row = int(np.argmax(empty))
            raise DomainError(f"sets[{row}]", "<empty set>", "a set of at least one item in each row")
    return vals


def element_matrix(params: SVIMParams, sets: NDArray[np.int64]) -> NDArray[np.bool_]:
    """(n, m) booleans: user r holds value j (item j, or every item of candidate j). Vectorised: a
    membership matrix over the items that occur in some candidate, then one matrix product."""
    import numpy as np

    n, d = sets.shape[0], params.domain.size
    if params.stage == ITEMS:
        held = np.zeros((n, d + 1), dtype=np.bool_)
        held[np.arange(n)[:, None], np.where(sets >= 0, sets, d)] = True
        return held[:, :d]
    used = sorted({x for c in params.candidates for x in c})
    col = np.full(d + 1, -1, dtype=np.int64)
    col[used] = np.arange(len(used))
    held = np.zeros((n, len(used) + 1), dtype=np.int32)
    cols = col[np.where(sets >= 0, sets, d)]
    held[np.arange(n)[:, None], np.where(cols >= 0, cols, len(used))] = 1
    member = np.zeros((len(used), len(params.candidates)), dtype=np.int32)
    for j, c in enumerate(params.candidates):  # one loop over the candidates, none over the users
        member[col[list(c)], j] = 1
    sizes = member.sum(axis=0)
    contained: NDArray[np.bool_] = (held[:, : len(used)] @ member) == sizes[None, :]
    return contained


def encode_sets(
    params: SVIMParams, sets: ArrayLike, rng: np.random.Generator, groups: ArrayLike | None = None
) -> tuple[Any, Any, Any, Any]:
    """Users of the stage report their sets (seeded ``rng``; simulation only), vectorised.

    Args:
        sets: integer matrix (n, w) of item indices, -1 in unused slots; every row non-empty.
        groups: each user's group (0 size, 1 PS), or None: drawn as the slots would give them
            (size w.p. size_share / (hi - lo)).

    Returns:
        Columns (groups uint16, a uint64, b uint64, buckets uint32).

    Raises:
        DomainError: an item outside [-1, d), a repeated item in a row, an empty row.
    """
    import numpy as np

    if not isinstance(rng, np.random.Generator):
        raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
    vals = _check_sets(params, sets)
    n = vals.shape[0]
    if params.stage == ITEMS:  # the row lists the elements: valid ones first after a descending sort
        rows_sorted = -np.sort(-vals, axis=1)
        k = (vals >= 0).sum(axis=1)
    else:
        held = element_matrix(params, vals)
        k = held.sum(axis=1)
    grp: NDArray[np.int64]
    if groups is None:
        width = params.stage_hi - params.stage_lo
        grp = (np.asarray(rng.integers(0, width, size=n)) >= params.size_share).astype(np.int64)
    else:
        grp = np.asarray(groups, dtype=np.int64)
    a = np.zeros(n, dtype=np.uint64)
    b = np.zeros(n, dtype=np.uint64)
    y = np.zeros(n, dtype=np.uint32)
    size_rows = np.flatnonzero(grp == SIZE_GROUP)
    y[size_rows] = GRREncoder(params.size_oracle).encode_batch(np.minimum(k[size_rows], params.size_cap), rng)
    ps = np.flatnonzero(grp == PS_GROUP)
    kp = k[ps]
    slot = (rng.random(ps.shape[0]) * np.maximum(kp, params.max_items)).astype(np.int64)
    inside = slot < kp
    if params.stage == ITEMS:
        pick = rows_sorted[ps, np.minimum(slot, vals.shape[1] - 1)]
    else:
        # Element number `slot` of the row: its (slot+1)-th True, found block by block (bounded memory).
        pick = np.zeros(ps.shape[0], dtype=np.int64)
        for start in range(0, ps.shape[0], _BLOCK):
            stop = min(ps.shape[0], start + _BLOCK)
            rank = np.cumsum(held[ps[start:stop]], axis=1, dtype=np.int32)
            pick[start:stop] = np.argmax(rank > slot[start:stop, None], axis=1)
    element = np.where(inside, pick, params.values + slot)
    if isinstance(params.inner, GRRParams):
        y[ps] = GRREncoder(params.inner).encode_batch(element, rng)
    else:
        a[ps], b[ps], y[ps] = LocalHashEncoder(params.inner).encode_batch(element, rng)
    return grp.astype(np.uint16), a, b, y


def all_itemsets(items: Sequence[int], max_size: int) -> list[tuple[int, ...]]:
    """Every subset of ``items`` of size 2..max_size, as sorted tuples (the SVIM candidate space)."""
    srt = sorted(items)
    return [c for r in range(2, max_size + 1) for c in itertools.combinations(srt, r)]
