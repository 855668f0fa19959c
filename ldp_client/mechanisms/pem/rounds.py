"""Adaptive multi-round prefix extension (issue 16): what round r's devices encode against, their encoder,
and the support the server computes for a round's candidates.

**Rounds.** An adaptive campaign (``PEMParams.adaptive``) collects its G levels one after the other: round
r is level r, answered by the devices whose group (:func:`~ldp_client.mechanisms.pem.group_of`, from the
client secret) is r, so every round has fresh users and every device still reports once per campaign. When
the operator closes round r the aggregator runs that level's discovery step and publishes the kept
prefixes; round r + 1's candidates are their extensions (:func:`~ldp_client.mechanisms.pem.level_candidates`).

**The round's oracle.** Round r's devices know the d candidates of their level, so their value's prefix is
one of d + 1 symbols: a candidate's index, or d ("none of them"). Two oracles are possible, the device and
the server choose the same one from the campaign and the published candidates (:func:`round_plan`):

* generalized randomized response over the d + 1 symbols (Kairouz, Bonawitz, Ramage, ICML 2016): the
  symbol kept w.p. p = T / 2**32, else a uniform other symbol. T is the largest integer with
  T d / (2**32 - T) <= T_lh (g - 1) / (2**32 - T_lh), the likelihood ratio of the campaign's local
  hashing (threshold T_lh over g buckets), decided in integers, so the round's epsilon ln(p d / (1 - p))
  is at most the campaign's. Report = (r, a = 0, b = 0, bucket = the symbol) as hio's GRR levels;
* local hashing, exactly as a one-round campaign (the digest of the level's prefix; the report does not
  depend on the candidates).

GRR is chosen when its per-candidate variance q(1 - q)/(p - q)**2 (q = (1 - p)/d) is below local
hashing's q*(1 - q*)/(p* - q*)**2 (Wang, Blocki, Li, Jha, USENIX Security 2017: GRR wins when
d + 1 < 3 e^eps + 2). This is where the rounds gain accuracy over one round: a one-round device does not
know the candidates and must hash; a round's devices spend the same epsilon on a small published set (at
eps = 4 and 128 candidates GRR's variance is about 0.83 of local hashing's; at eps = 8 and 2,048, 0.42).
With local hashing the rounds estimate as one round does (the candidates are the same top_k extensions).

**Support.** GRR: report y supports candidate i iff y = i, with p* = p, q* = (1 - p)/d (exact). Local
hashing: :func:`~ldp_client.mechanisms.pem.support_counts`, p* and q* of the campaign.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from ldp_client import _oracle_math, privacy
from ldp_client import randomness as _rnd
from ldp_client._prob import PROB_ONE
from ldp_client.errors import InvalidParameterError, InvalidReportError, RoundNotOpenError
from ldp_client.layouts import Support
from ldp_client.mechanisms.pem.core import (
    PEMEncoder,
    PEMParams,
    PEMReport,
    Prefix,
    PrefixHasher,
    group_of,
    level_candidates,
    prefix_digest,
    prefix_of,
    support_counts,
    value_bytes,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ldp_client.secret import ClientSecret

__all__ = [
    "GRRRoundEncoder",
    "RoundPlan",
    "check_round_columns",
    "encode_round_batch",
    "grr_round_threshold",
    "round_encoder",
    "round_plan",
    "round_support",
]

_M32: Final = PROB_ONE - 1


def grr_round_threshold(params: PEMParams, d: int) -> int:
    """The largest T with T d / (2**32 - T) <= T_lh (g - 1) / (2**32 - T_lh) (module docstring), in
    integers: T = floor(T_lh (g - 1) 2**32 / (d (2**32 - T_lh) + T_lh (g - 1)))."""
    t_lh, g = params.truth_threshold, params.g
    num = t_lh * (g - 1)
    return min(PROB_ONE - 1, (num * PROB_ONE) // (d * (PROB_ONE - t_lh) + num))


@dataclass(frozen=True, kw_only=True)
class RoundPlan:
    """Round ``round``'s candidates and oracle, as the device and the server derive them.

    Attributes:
        params: the campaign's parameters (adaptive).
        round: the round, which is also the level.
        candidates: the level's candidates (extensions of the prefixes published after the round before).
        grr: whether the round reports with GRR over candidates + "none" (else local hashing).
        threshold: GRR's T (p = T / 2**32); 0 under local hashing.
    """

    params: PEMParams
    round: int
    candidates: tuple[Prefix, ...]
    grr: bool
    threshold: int
    index: dict[Prefix, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", {c: i for i, c in enumerate(self.candidates)})

    @property
    def symbols(self) -> int:
        """d + 1: the candidates and "none of them"."""
        return len(self.candidates) + 1

    @property
    def p_star(self) -> float:
        return self.threshold / PROB_ONE if self.grr else self.params.p_star

    @property
    def q_star(self) -> float:
        if self.grr:
            return (PROB_ONE - self.threshold) / PROB_ONE / len(self.candidates)
        return self.params.q_star

    @property
    def epsilon(self) -> float:
        """The epsilon of one report of this round (at most the campaign's)."""
        if self.grr:
            return privacy.grr_epsilon(self.threshold / PROB_ONE, self.symbols)
        return self.params.epsilon

    @property
    def bucket_limit(self) -> int:
        """Reports' buckets are below this: d + 1 symbols, or g buckets."""
        return self.symbols if self.grr else self.params.g


def round_plan(params: PEMParams, round_: int, kept: Sequence[tuple[int, int]]) -> RoundPlan:
    """Round ``round_``'s plan given the prefixes published after the round before (none for round 0).

    Raises:
        InvalidParameterError: not an adaptive campaign, a round outside [0, G), or no candidates.
    """
    if not isinstance(params, PEMParams) or not params.adaptive:
        raise InvalidParameterError("params", getattr(params, "name", params), "adaptive pem parameters")
    if isinstance(round_, bool) or not isinstance(round_, int) or not 0 <= round_ < params.levels:
        raise InvalidParameterError("round", round_, f"a round in [0, {params.levels - 1}]")
    if round_ > 0 and not kept:
        raise InvalidParameterError("kept", (), f"the prefixes published after round {round_ - 1}")
    parents = [Prefix(*p) for p in kept] if round_ else []
    if round_:
        bits, sym = params.prefix_bits(round_ - 1), params.symbol_bits
        for i, parent in enumerate(parents):
            if not (1 <= parent.length <= params.max_length and 0 <= parent.bits < 1 << bits) or (
                sym * parent.length < bits and parent.bits & ((1 << (bits - sym * parent.length)) - 1)
            ):
                raise InvalidParameterError(
                    f"discovery_rounds[{round_ - 1}].kept[{i}]",
                    tuple(parent),
                    f"a level-{round_ - 1} prefix: length 1..{params.max_length}, {bits} bits,"
                    " zero past the length",
                )
    candidates = level_candidates(params, round_, parents)
    d = len(candidates)
    t = grr_round_threshold(params, d)
    grr = False
    if t * (d + 1) > PROB_ONE:  # p > 1/(d + 1): GRR informative
        p = t / PROB_ONE
        q = (1.0 - p) / d
        grr = _oracle_math.oracle_variance(p, q) < _oracle_math.oracle_variance(params.p_star, params.q_star)
    return RoundPlan(params=params, round=round_, candidates=candidates, grr=grr, threshold=t if grr else 0)


class GRRRoundEncoder:
    """A device's encoder for a GRR round: the symbol of its level prefix (a candidate's index or d), kept
    w.p. T / 2**32, else a uniform other symbol (OS CSPRNG)."""

    __slots__ = ("_d", "_hasher", "_index", "_keys", "_round", "_truth")

    def __init__(self, plan: RoundPlan) -> None:
        self._round = plan.round
        self._d = len(plan.candidates)
        self._truth = plan.threshold
        self._hasher = PrefixHasher(plan.params, plan.round)
        s = plan.params.prefix_bits(plan.round)
        # Candidates by their digest: the hot path hashes the value's prefix once (as the local-hashing
        # encoder does) and looks it up; distinct prefixes share a 64-bit digest w.p. about 2**-64.
        self._keys = {prefix_digest(plan.round, s, c): i for i, c in enumerate(plan.candidates)}

    def __repr__(self) -> str:
        return f"GRRRoundEncoder(round={self._round}, candidates={self._d})"

    def encode(self, value: str | bytes) -> PEMReport:
        """Randomize one value (str as UTF-8, or bytes; 1 to max_length bytes).

        Raises:
            DomainError: empty, too long, or neither str nor bytes.
        """
        symbol = self._keys.get(self._hasher.digest(value), self._d)
        r = int.from_bytes(_rnd._source(8), "little")
        if (r & _M32) < self._truth:
            return PEMReport(self._round, 0, 0, symbol)
        other = _rnd.uniform_below(self._d, r >> 32)  # one of the d other symbols
        return PEMReport(self._round, 0, 0, other + 1 if other >= symbol else other)


def round_encoder(
    params: PEMParams,
    *,
    campaign_id: str,
    secret: ClientSecret,
    current: int,
    published: Sequence[Sequence[tuple[int, int]]],
) -> Callable[[Any], PEMReport]:
    """The device's encoder for the round collecting now, ``current``, given the prefixes each closed round
    published (``Campaign.discovery_rounds``' ``kept``, as (length, bits) pairs).

    Raises:
        RoundNotOpenError: the device's round (its group, from its secret) is not the round collecting.
        InvalidParameterError: not an adaptive campaign, or published prefixes missing.
    """
    mine = group_of(params, campaign_id, secret)
    if mine != current:
        raise RoundNotOpenError(campaign_id, mine, current, params.levels)
    kept = [Prefix(*p) for p in published[current - 1]] if current else []
    plan = round_plan(params, current, kept)
    if plan.grr:
        return GRRRoundEncoder(plan).encode
    return PEMEncoder(params, group=mine).encode


def check_round_columns(plan: RoundPlan, columns: Any, campaign_id: str) -> None:
    """A batch of round ``plan.round``: every report of that round, with buckets below the round's limit
    (GRR: d + 1 symbols, with a = b = 0).

    Raises:
        RoundNotOpenError: a report of another round (named).
        InvalidReportError: a bucket or seed that the round's oracle cannot produce.
    """
    import numpy as np

    groups, a, b, y = columns
    if groups.size == 0:
        return
    other = np.flatnonzero(groups != plan.round)
    if other.size:
        raise RoundNotOpenError(campaign_id, int(groups[other[0]]), plan.round, plan.params.levels)
    limit = plan.bucket_limit
    high = np.flatnonzero(y >= limit)
    if high.size:
        i = int(high[0])
        raise InvalidReportError(
            f"pem.buckets[{i}]", int(y[i]), f"a bucket in [0, {limit - 1}] (round {plan.round}'s oracle)"
        )
    if plan.grr:
        seeded = np.flatnonzero((a != 0) | (b != 0))
        if seeded.size:
            i = int(seeded[0])
            raise InvalidReportError(f"pem.a[{i}]", int(a[i]), f"a = b = 0 (round {plan.round} is GRR)")


def round_support(
    plan: RoundPlan,
    groups: NDArray[Any],
    a: NDArray[np.uint64],
    b: NDArray[np.uint64],
    y: NDArray[Any],
    candidates: Sequence[Prefix],
) -> Support:
    """The support of some of the round's candidates among its reports (module docstring)."""
    import numpy as np

    mine = groups == plan.round
    n = int(np.count_nonzero(mine))
    if plan.grr:
        index = plan.index
        missing = [c for c in candidates if c not in index]
        if missing:
            raise InvalidParameterError("candidates", missing[0], f"a candidate of round {plan.round}")
        hits = np.bincount(y[mine].astype(np.int64), minlength=plan.symbols)
        counts = hits[np.array([index[c] for c in candidates], dtype=np.int64)]
    else:
        s = plan.params.prefix_bits(plan.round)
        keys = np.array([prefix_digest(plan.round, s, c) for c in candidates], dtype=np.uint64)
        counts = support_counts(a[mine], b[mine], y[mine], keys, plan.params.g)
    return Support(
        labels=tuple(str(i) for i in range(len(candidates))),
        counts=counts,
        n=n,
        p_star=plan.p_star,
        q_star=plan.q_star,
    )


def encode_round_batch(
    plan: RoundPlan, values: NDArray[np.int64], labels: Sequence[str], rng: np.random.Generator
) -> tuple[Any, Any, Any, Any]:
    """Simulated users of round ``plan.round`` (seeded ``rng`` only): the round's oracle on each user's
    level prefix, vectorised; columns as a batch of the campaign (groups, a, b, buckets)."""
    import numpy as np

    from ldp_client.mechanisms._batchbits import raw_words
    from ldp_client.mechanisms.olh import hash_buckets
    from ldp_client.mechanisms.pem.core import _label_keys

    params, r = plan.params, plan.round
    idx = np.asarray(values, dtype=np.int64)
    n = idx.shape[0]
    groups = np.full(n, r, dtype=np.uint16)
    truthful_draw = rng.integers(0, PROB_ONE, size=n, dtype=np.uint64)
    if plan.grr:
        d = len(plan.candidates)
        symbols = _label_symbols(plan, tuple(labels))[idx]
        others = np.asarray(rng.integers(0, d, size=n, dtype=np.int64))
        others = others + (others >= symbols)
        buckets = np.where(truthful_draw < plan.threshold, symbols, others).astype(np.uint32)
        zeros = np.zeros(n, dtype=np.uint64)
        return groups, zeros, zeros.copy(), buckets
    keys = _label_keys(params, tuple(labels))[idx, r]
    a = raw_words(rng, n).astype(np.uint64)
    b = raw_words(rng, n).astype(np.uint64)
    own = hash_buckets(a, b, keys, params.g).astype(np.int64)
    other = np.asarray(rng.integers(0, params.g - 1, size=n, dtype=np.int64))
    other = other + (other >= own)
    buckets = np.where(truthful_draw < params.truth_threshold, own, other).astype(np.uint32)
    return groups, a, b, buckets


def _label_symbols(plan: RoundPlan, labels: tuple[str, ...]) -> Any:
    """Each label's symbol in a GRR round: its level prefix's candidate index, or d (simulation)."""
    import numpy as np

    params, r, d = plan.params, plan.round, len(plan.candidates)
    index = plan.index
    return np.array(
        [index.get(prefix_of(params, r, value_bytes(params, label)), d) for label in labels], dtype=np.int64
    )
