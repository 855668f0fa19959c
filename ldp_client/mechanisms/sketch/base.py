"""What the count-mean sketch and the Hadamard count-mean sketch share.

Parameters (:class:`SketchParams`): k hash rows, width m, and the probability f of flipping each sent sign
(a multiple of 2**-32, :mod:`ldp_client._prob`). A device holds a string of any length; row j of the
campaign hashes it to ``bucket_j(v)`` in [0, m) (:mod:`.hashing`).

**Support.** A report names its row j; it *supports* candidate v when its sign at bucket_j(v) (cms: the
sent bit there; hcms: the sent sign times H[bucket_j(v), l]) is +1. Under the random-hash model (the
campaign's keys are random, so two distinct strings share a row's bucket with probability S, the
collision mass: 1/m for a power of two), with a = 1 - 2f:

======  =============  ===========================
        p*             q*
======  =============  ===========================
cms     1 - f          f + a S
hcms    1 - f          1/2 + a S / 2
======  =============  ===========================

and the one pure-oracle estimator (:class:`ldp_client.spec.Support`) gives count_hat_v = (C_v - n q*) /
(p* - q*), unbiased over the reports' noise, the rows they pick and the campaign's hashes.

**Variance with the hash-collision term.** The users holding one value x share its bucket in every row, so
their collisions with v are not independent: given the row counts N_{x,j} ~ Multinomial(c_x, 1/k), the
number A of other users colliding with v has Var(A) = S (1 - S) [(n - c_v)(1 - 1/k) + sum_{x != v} c_x^2/k].
Adding the reports' own noise (each report's support indicator has variance f(1 - f) given everything
else; hcms adds its column's sign, a fair coin for a non-colliding user) and subtracting the contract's
variance (which treats every report as an independent Bernoulli(q*)) leaves, on the count scale, for both
sketches::

    Var[count_hat_v] = contract variance + S / (1 - S) * sum_{x != v} c_x (c_x - 1) / k

(exact under the model; the calibration of ``bench/bench_sketch_calibration.py`` checks it, campaign
by campaign). ``sum_x c_x (c_x - 1) / k`` is the expected number of ordered pairs
of distinct users who hold the same value and picked the same row, P. It is estimated from the sketch
itself, so that the mass outside the candidate list counts as it should (a frequent string nobody lists
still collides with the candidates): with T_{j,b} the users of row j whose value hashes to bucket b and
T_hat its unbiased estimate from the reports (:meth:`SketchSpec.row_squares`),

    Q_j = sum_b T_hat_{j,b}^2 - (its noise)  estimates  sum_b T_{j,b}^2 = n_j + P_j + (n_j(n_j - 1) - P_j) S

over the hashes, so P_hat = sum_j (Q_j - n_j - S n_j (n_j - 1)) / (1 - S), and the extra variance of
candidate v is S/(1 - S) max(0, P_hat - c_hat_v (c_hat_v - 1)/k), with c_hat_v clipped to [0, n]
(``docs/sketches.md``). Plugging in the candidates' own estimates instead (sum over candidates of
c_hat^2) would miss the mass outside the list and add every candidate's variance: at 10^6 candidates that
is 10^6 n Var*, far more than the term itself.

Importing this module does not import numpy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ldp_client._prob import PROB_ONE, quantize_probability, rounding_note, threshold_to_probability
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.domain import check_epsilon, no_more_fields, take_field
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.sketch import hashing
from ldp_client.spec import Kind, MakeArgs, MechanismSpec, SumSampler, Support

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "DEFAULT_ROWS",
    "DEFAULT_WIDTH",
    "MAX_ROWS",
    "SketchParams",
    "SketchSpec",
    "balanced_inputs",
    "bucket_totals",
]

MAX_ROWS = 1 << 16
"""Most hash rows k (the accumulator's cohorts)."""
DEFAULT_ROWS = 64
"""k when not given: 64 rows make the collision term 64 times smaller than one row at log2(64) bits."""
DEFAULT_WIDTH = 1024
"""m when not given (Apple's published width)."""
# Values per block of the exact sum sampler's multinomial split of users into rows (bounded memory).
_SAMPLER_BLOCK = 1 << 15
# Strings tried when looking for inputs that collide in exactly the expected share of rows.
_BALANCED_SEARCH = 4000
_EXAMPLE_CAMPAIGN = "example"


@dataclass(frozen=True, kw_only=True)
class SketchParams:
    """k hash rows, width m and the flip probability f of a sketch (a multiple of 2**-32, in (0, 1/2)).

    Subclasses fix the name, the limits of k and m (:meth:`_check_shape`) and epsilon.
    """

    name: ClassVar[str]
    k: int = DEFAULT_ROWS
    m: int = DEFAULT_WIDTH
    flip_probability: float
    flip_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._check_shape()
        t = quantize_probability("flip_probability", self.flip_probability)
        if not 0 < t < PROB_ONE // 2:
            raise InvalidParameterError(
                "flip_probability",
                self.flip_probability,
                "a probability in (0, 1/2)" + rounding_note("flip_probability", self.flip_probability, t),
            )
        object.__setattr__(self, "flip_threshold", t)

    def _check_shape(self) -> None:  # pragma: no cover - every concrete class overrides it
        raise NotImplementedError

    @property
    def flip(self) -> float:
        """f, exactly as sampled: flip_threshold / 2**32."""
        return threshold_to_probability(self.flip_threshold)

    @property
    def collision_mass(self) -> float:
        """S: P(two strings with different fingerprints share a row's bucket) over the campaign's keys."""
        return float(hashing.collision_mass(self.m))

    @property
    def epsilon(self) -> float:  # pragma: no cover - every concrete class overrides it
        raise NotImplementedError

    @property
    def p_star(self) -> float:
        """P(a report supports v | its user holds v) = 1 - f."""
        return 1.0 - self.flip

    @property
    def q_star(self) -> float:  # pragma: no cover - every concrete class overrides it
        raise NotImplementedError

    @property
    def report_bits(self) -> int:  # pragma: no cover - every concrete class overrides it
        raise NotImplementedError


def flip_threshold_for(epsilon: float, signs: int) -> int:
    """The smallest threshold T (f = T/2**32, rounded toward privacy: a larger f is more private) with
    ``signs`` ln((2**32 - T)/T) <= epsilon, decided exactly; 0 if even f just below 1/2 exceeds it."""
    from ldp_client._prob import ratio_within_exp, smallest_threshold

    eps = check_epsilon(epsilon)
    estimate = math.ceil(PROB_ONE / (math.exp(min(eps / signs, 700.0)) + 1.0))
    return smallest_threshold(
        lambda t: ratio_within_exp((PROB_ONE - t) ** signs, t**signs, eps), estimate, 1, PROB_ONE // 2 - 1
    )


SP = TypeVar("SP", bound=SketchParams)


class SketchSpec(MechanismSpec[SP]):
    """The spec part the two sketches share: kind SUPPORT over candidate strings given when estimating.

    Parameters by name: ``k``, ``m`` (defaults 64 and 1024) and ``flip_probability``, or ``epsilon``
    instead of the latter; no domain (a device hashes any string). Wire: ``CountMeanSketchParams``.
    Subclasses give the support counts of candidates (:meth:`candidate_counts`), the squared bucket totals
    of the collision term (:meth:`row_squares`), the sum sampler's last step (:meth:`sample_from_totals`)
    and everything about their reports.
    """

    kind: ClassVar[Kind] = Kind.SUPPORT
    estimates_candidates: ClassVar[bool] = True
    epsilon_field: ClassVar[str | None] = "flip_probability"

    # ------------------------------------------------------------------------------------ parameters

    def make(self, *, epsilon: float | None, domain: Any, fields: dict[str, object]) -> SP:
        cls: Any = self.params_type
        if domain is not None:
            raise InvalidParameterError(
                "domain",
                domain,
                f"none for {self.name} (devices hash strings of any kind; give candidate strings when "
                "estimating)",
            )
        k = take_field(fields, "k", int, self.name) if "k" in fields else DEFAULT_ROWS
        m = take_field(fields, "m", int, self.name) if "m" in fields else DEFAULT_WIDTH
        if epsilon is not None:
            no_more_fields(fields, self.name, ("k", "m"))
            return cls.from_epsilon(epsilon, k=k, m=m)  # type: ignore[no-any-return]
        if "flip_probability" not in fields:
            raise InvalidParameterError(
                "params", sorted(fields), f"epsilon, or flip_probability for {self.name}"
            )
        f = take_field(fields, "flip_probability", float, self.name)
        no_more_fields(fields, self.name, ("k", "m", "flip_probability"))
        return cls(k=k, m=m, flip_probability=f)  # type: ignore[no-any-return]

    def make_args(self, params: SP) -> MakeArgs:
        return MakeArgs(fields={"k": params.k, "m": params.m, "flip_probability": params.flip_probability})

    def params_to_proto(self, params: SP) -> campaign_pb2.CountMeanSketchParams:
        return campaign_pb2.CountMeanSketchParams(
            k=params.k, m=params.m, flip_probability=params.flip_probability
        )

    def params_from_proto(self, msg: campaign_pb2.CountMeanSketchParams) -> SP:
        cls: Any = self.params_type
        return cls(k=msg.k, m=msg.m, flip_probability=msg.flip_probability)  # type: ignore[no-any-return]

    def report_bits(self, params: SP) -> int:
        return params.report_bits

    # ---------------------------------------------------------------------------------------- server

    def support_rates(self, params: SP) -> tuple[float, float]:
        return params.p_star, params.q_star

    def items_per_user(self, params: SP) -> tuple[int, int]:
        """A user holds one string, which may or may not be a candidate: 0 or 1 of the items."""
        return (0, 1)

    def candidate_counts(
        self, params: SP, acc: Any, candidates: Sequence[str], campaign_id: str
    ) -> NDArray[Any]:
        """C_v: how many reports support each candidate (numpy)."""
        raise NotImplementedError

    def row_squares(self, params: SP, acc: Any) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(n_j, Q_j) per row: its reports, and an unbiased estimate of sum_b T_{j,b}^2 (module docstring)."""
        raise NotImplementedError

    def candidate_support(
        self, params: SP, acc: Any, candidates: Sequence[str], *, campaign_id: str
    ) -> Support:
        import numpy as np

        counts = self.candidate_counts(params, acc, candidates, campaign_id)
        n = int(acc.n)
        p_star, q_star = self.support_rates(params)
        return Support(
            labels=tuple(candidates),
            counts=counts,
            n=n,
            p_star=p_star,
            q_star=q_star,
            extra_variance=self.collision_variance(params, acc, np.asarray(counts, dtype=np.float64), n),
        )

    def collision_variance(
        self, params: SP, acc: Any, counts: NDArray[np.float64], n: int
    ) -> NDArray[np.float64]:
        """The hash-collision term of each candidate's variance, from the sketch (module docstring)."""
        import numpy as np

        s = params.collision_mass
        n_j, q_j = self.row_squares(params, acc)
        pairs = float(np.sum((q_j - n_j - s * n_j * (n_j - 1.0)) / (1.0 - s)))
        p_star, q_star = self.support_rates(params)
        c_hat = np.clip((counts - n * q_star) / (p_star - q_star), 0.0, float(n))
        own = np.maximum(c_hat * (c_hat - 1.0), 0.0) / params.k
        out: NDArray[np.float64] = s / (1.0 - s) * np.maximum(pairs - own, 0.0)
        return out

    # ------------------------------------------------------------------------------------ simulation

    def sample_from_totals(
        self, params: SP, n_j: NDArray[np.int64], totals: NDArray[np.int64], rng: np.random.Generator
    ) -> Any:
        """The layout's sums given each row's bucket totals T_{j,b} (the last step of the sum sampler)."""
        raise NotImplementedError

    def sum_sampler(self, params: SP) -> SumSampler | None:
        def sample(
            true_counts: NDArray[np.int64],
            rng: np.random.Generator,
            *,
            campaign_id: str,
            labels: Sequence[str],
        ) -> Any:
            n_j, totals = bucket_totals(params, true_counts, rng, campaign_id=campaign_id, labels=labels)
            return self.sample_from_totals(params, n_j, totals, rng)

        return sample

    # ------------------------------------------------------------------------------ conformance tests

    def campaign_inputs(self, params: SP, campaign_id: str) -> tuple[Any, ...]:
        """Three strings of which every two share a bucket in exactly k S rows (:func:`balanced_inputs`)."""
        return balanced_inputs(campaign_id, params.k, params.m)

    def inputs(self, params: SP) -> tuple[Any, ...]:
        return self.campaign_inputs(params, _EXAMPLE_CAMPAIGN)

    def exact_outputs(self, params: SP, value: Any) -> Mapping[Hashable, Fraction]:
        """:meth:`campaign_outputs` for a campaign called ``example`` (the buckets depend on the id)."""
        return self.campaign_outputs(params, value, _EXAMPLE_CAMPAIGN)

    @staticmethod
    def value_buckets(params: SketchParams, value: Any, campaign_id: str) -> list[int]:
        """bucket_j(value) for every row j of the campaign (pure Python)."""
        fp = hashing.fingerprint(hashing.value_bytes("value", value))
        return [hashing.bucket(key, fp, params.m) for key in hashing.row_keys(campaign_id, params.k)]


def bucket_totals(
    params: SketchParams,
    true_counts: NDArray[np.int64],
    rng: np.random.Generator,
    *,
    campaign_id: str,
    labels: Sequence[str],
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(n_j, T): per row j the users who picked it, and T[j, b] those of them whose string hashes to bucket
    b, for ``true_counts[i]`` users holding ``labels[i]`` (simulation, seeded ``rng``).

    Each value's users pick rows uniformly: N_{x,.} ~ Multinomial(c_x, 1/k), drawn for a block of values at
    a time, and summed into their buckets row by row: exactly the law of the users' rows and buckets.
    """
    import numpy as np

    from ldp_client._exact_sampling import as_counts, check_rng

    g = check_rng(rng)
    c = as_counts("true_counts", true_counts, ndim=1, shape=(len(labels),))
    k, m = params.k, params.m
    nz = np.flatnonzero(c)
    fps = hashing.fingerprints(tuple(labels))
    a0, a1, b = hashing.key_arrays(campaign_id, k)
    totals = np.zeros((k, m), dtype=np.int64)
    n_j = np.zeros(k, dtype=np.int64)
    uniform = np.full(k, 1.0 / k)
    for start in range(0, nz.size, _SAMPLER_BLOCK):
        block = nz[start : start + _SAMPLER_BLOCK]
        split = g.multinomial(c[block], uniform)  # (values, k): the users of each value in each row
        n_j += split.sum(axis=0)
        for j in range(k):
            buckets = hashing.hash_buckets(fps[block], a0[j], a1[j], b[j], m)
            totals[j] += np.bincount(buckets, weights=split[:, j], minlength=m).astype(np.int64)
    return n_j, totals


@functools.lru_cache(maxsize=32)
def balanced_inputs(campaign_id: str, k: int, m: int, want: int = 3) -> tuple[str, ...]:
    """``want`` strings ``value-i`` of which every two share a bucket in exactly k/m of the k rows.

    Over the campaign's random keys two strings share a row's bucket with probability S = 1/m, so these
    inputs meet, at their expected counts, exactly the model the estimator assumes: the conformance check
    that the estimator is exact there needs no hash family average. (They also differ in some row, so the
    exact epsilon is reached.) Needs m to divide k.

    Raises:
        InvalidParameterError: m does not divide k, or no such strings among the first few thousand.
    """
    if k % m:
        raise InvalidParameterError("k", k, f"a multiple of m={m} for the exhaustive checks")
    agree = k // m
    keys = hashing.row_keys(campaign_id, k)
    vectors: list[tuple[int, ...]] = []

    def balanced(u: tuple[int, ...], v: tuple[int, ...]) -> bool:
        return sum(x == y for x, y in zip(u, v, strict=True)) == agree

    for i in range(_BALANCED_SEARCH):
        fp = hashing.fingerprint(f"value-{i}".encode())
        vec = tuple(hashing.bucket(key, fp, m) for key in keys)
        friends = [j for j, other in enumerate(vectors) if balanced(other, vec)]
        found = _clique(vectors, friends, want - 1, balanced)
        if found is not None:
            return tuple(f"value-{j}" for j in (*found, i))
        vectors.append(vec)
    raise InvalidParameterError(
        "k", k, f"rows and width (m={m}) with {want} balanced strings among the first few"
    )


def _clique(
    vectors: list[tuple[int, ...]],
    members: list[int],
    size: int,
    balanced: Callable[[tuple[int, ...], tuple[int, ...]], bool],
) -> tuple[int, ...] | None:
    """``size`` of ``members`` balanced pairwise (a small backtracking search), or None."""
    if size == 0:
        return ()
    for pos, first in enumerate(members):
        rest = [j for j in members[pos + 1 :] if balanced(vectors[first], vectors[j])]
        found = _clique(vectors, rest, size - 1, balanced)
        if found is not None:
            return (first, *found)
    return None
