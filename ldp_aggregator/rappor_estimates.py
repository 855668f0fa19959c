"""String RAPPOR's estimates from bit counts: debiased Bloom bits per cohort and counts of candidate strings.

String RAPPOR (Erlingsson, Pihur, Korolova, CCS 2014) is decoded at the bit level per cohort
(:func:`estimate_rappor_bits`, after Google's ``analysis/R/decode.R``) and for a candidate dictionary by
weighted least squares (:func:`estimate_rappor_candidates`), the unpenalised refit of
:mod:`ldp_aggregator.rappor_decode`. Pure functions of (parameters, accumulator); the frequency oracles'
one estimator and the estimate types are in :mod:`ldp_aggregator.estimators`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ldp_aggregator.accumulators import Accumulator, BitCountAccumulator, check_matches
from ldp_aggregator.estimation import NoReportsError, normal_quantile
from ldp_aggregator.estimators import FrequencyEstimate, OracleArrays, _check_candidates, _items
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.params import RapporParams
from ldp_client.spec import BitsView

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "RapporBitEstimate",
    "estimate_rappor_bits",
    "estimate_rappor_candidates",
    "rappor_design",
]

# Relative size (to the largest) below which a pivot of the candidate Gram matrix counts as zero: the
# Gram of a 0/1 design has exact small-integer structure, so true dependencies show up near 1e-15.
_RANK_RTOL = 1e-10
# How many colliding / dependent candidates an error message lists before eliding the rest.
_MAX_NAMED = 10


@dataclass(frozen=True, kw_only=True, eq=False)
class RapporBitEstimate:
    """Debiased Bloom-bit counts per cohort: ``counts[j, i]`` estimates how many of the
    ``cohort_reports[j]`` reporters in cohort j have Bloom bit i set; ``std_errors`` likewise (m, k)."""

    cohort_reports: NDArray[np.int64]
    counts: NDArray[np.float64]
    std_errors: NDArray[np.float64]


def _rappor_bit_arrays(
    params: RapporParams, acc: BitsView
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(t_hat (m, k), Var[t_hat] (m, k)) per decode.R's EstimateBloomCounts (see estimate_rappor_bits)."""
    ps, qs = params.prob_one_if_clear, params.prob_one_if_set
    delta = qs - ps
    N = acc.cohort_reports.astype(np.float64)[:, None]
    c = acc.ones.astype(np.float64)
    t_hat = (c - ps * N) / delta
    # r = observed rate c/N = p* + (t_hat/N)(q* - p*), clamped to [p*, q*] (t_hat/N clamped to [0, 1]).
    rate = np.divide(c, N, out=np.full_like(c, ps), where=N > 0)
    r = np.clip(rate, min(ps, qs), max(ps, qs))
    var = N * r * (1.0 - r) / (delta * delta)
    return t_hat, var


def estimate_rappor_bits(params: RapporParams, acc: BitCountAccumulator) -> RapporBitEstimate:
    """Debiased Bloom-bit counts per cohort (CCS 2014 §4; google/rappor ``decode.R``, EstimateBloomCounts).

    With N_j reports in cohort j, c_ij of which set bit i, p* = P(1|Bloom bit 0), q* = P(1|Bloom bit 1):

        t_ij = (c_ij - p* N_j) / (q* - p*)
        Var[t_ij] = N_j r (1 - r) / (q* - p*)^2,  r = clamp(c_ij / N_j, p*, q*)

    (decode.R writes the denominator as (1-f)(q-p), which equals q* - p*.) A cohort with no reports
    gives t = 0 with standard error 0.

    Raises:
        InvalidReportError: ``acc`` is not the (m, k) bit accumulator of ``params``.
    """
    if not isinstance(params, RapporParams):
        raise InvalidParameterError("params", getattr(params, "name", params), "RapporParams")
    check_matches(acc, params)
    t_hat, var = _rappor_bit_arrays(params, _as_bits(acc))
    return RapporBitEstimate(cohort_reports=acc.cohort_reports.copy(), counts=t_hat, std_errors=np.sqrt(var))


def _as_bits(acc: Accumulator) -> BitCountAccumulator:
    if not isinstance(acc, BitCountAccumulator):  # unreachable after check_matches; narrows the type
        raise InvalidReportError("accumulator", type(acc).__name__, "a BitCountAccumulator")
    return acc


def _bits_view(params: RapporParams, acc: object) -> BitsView:
    """``acc`` checked against ``params``: its bit accumulator, or any :class:`~ldp_client.spec.BitsView`
    of the same shape (the expected sums of an exactness test, which are not integers)."""
    if isinstance(acc, BitCountAccumulator) or not hasattr(acc, "ones"):
        check_matches(acc, params)  # type: ignore[arg-type]  # raises for anything but the accumulator
        return _as_bits(acc)  # type: ignore[arg-type]
    view = cast(BitsView, acc)
    shape = (np.shape(view.cohort_reports), np.shape(view.ones))
    if shape != ((params.m,), (params.m, params.k)):
        raise InvalidReportError(
            "accumulator", shape, f"bit sums of shape ({params.m},), {params.m, params.k}"
        )
    return view


@functools.lru_cache(maxsize=8)
def _design_cached(
    campaign_id: str, k: int, h: int, m: int, candidates: tuple[str, ...]
) -> NDArray[np.int64]:
    # Imported here: the client module is only needed when a dictionary is decoded.
    from ldp_client.mechanisms.rappor.encoding import _positions, bloom_input

    # The client hashes bloom_input(id, cohort, value) = prefix(cohort) || lp(value) (spec v1, section 2)
    # with _positions, the function bloom_positions calls. Build each part once rather than once per
    # (candidate, cohort): 3x faster, which matters at 10^5 candidates x 64 cohorts.
    cut = len(bloom_input(campaign_id, 0, "")) - 4  # len(lp(id) || u32(cohort)); lp("") is 4 bytes
    prefixes = [bloom_input(campaign_id, j, "")[:cut] for j in range(m)]
    pos = np.empty((len(candidates), m, h), dtype=np.int64)
    block = 4096
    for start in range(0, len(candidates), block):
        flat: list[int] = []
        extend = flat.extend
        chunk = candidates[start : start + block]
        for cand in chunk:
            value = bloom_input(campaign_id, 0, cand)[cut:]  # validates the string (UTF-8) as the client does
            for prefix in prefixes:
                extend(_positions(prefix + value, k, h))
        pos[start : start + len(chunk)] = np.array(flat, dtype=np.int64).reshape(len(chunk), m, h)
    pos.setflags(write=False)
    return pos


def rappor_design(params: RapporParams, campaign_id: str, candidates: Sequence[str]) -> NDArray[np.int64]:
    """Bloom positions of every candidate in every cohort: int array (M, m, h), read-only.

    ``X[(j, i), v] = 1`` iff i is in ``rappor_design(...)[v, j]`` (a position may repeat when two
    hashes collide; the Bloom bit is then set once). Computed with
    :func:`ldp_client.mechanisms.rappor.bloom_positions` and cached for the last few dictionaries.
    """
    if not isinstance(campaign_id, str):
        raise InvalidParameterError("campaign_id", campaign_id, "a string")
    return _design_cached(campaign_id, params.k, params.h, params.m, _check_candidates(candidates))


def _design_matrix(pos: NDArray[np.int64], k: int, rows_used: NDArray[np.bool_]) -> Any:
    """Sparse 0/1 design X ((m*k) x M, CSC) from Bloom positions, keeping only cohorts in ``rows_used``."""
    from scipy import sparse

    M, m, h = pos.shape
    row = (np.arange(m, dtype=np.int64)[None, :, None] * k + pos).reshape(M, m * h)
    keep = np.repeat(rows_used, h)
    row = row[:, keep]
    col = np.repeat(np.arange(M, dtype=np.int64), row.shape[1])
    X = sparse.csc_matrix(
        (np.ones(row.size, dtype=np.float64), (row.ravel(), col)), shape=(m * k, M), dtype=np.float64
    )
    X.sum_duplicates()
    # Two hashes hitting the same bit set it once.
    X.data[:] = 1.0
    return X


def _name_list(names: Sequence[str]) -> str:
    shown = ", ".join(repr(s) for s in names[:_MAX_NAMED])
    return shown + (f", ... ({len(names)} in all)" if len(names) > _MAX_NAMED else "")


def _check_rows(M: int, n_rows: int) -> None:
    """More candidates than equations (cohort-bits with reports) can never be identified."""
    if n_rows < M:
        raise InvalidParameterError(
            "candidates",
            f"{M} candidates",
            f"at most {n_rows} (cohorts with reports x k bits) candidates can be identified",
        )


def _identifiable_inverse(
    X: Any, G: NDArray[np.float64], candidates: tuple[str, ...], n_rows: int
) -> NDArray[np.float64]:
    """G^-1 for the WLS normal matrix G = X' W X, or InvalidParameterError saying why it is singular."""
    from scipy import linalg

    M = len(candidates)
    _check_rows(M, n_rows)
    # Identical columns: candidates whose Bloom filters agree in every cohort with reports.
    groups: dict[bytes, list[str]] = {}
    for v in range(M):
        key = X.indices[X.indptr[v] : X.indptr[v + 1]].tobytes()
        groups.setdefault(key, []).append(candidates[v])
    collisions = [g for g in groups.values() if len(g) > 1]
    if collisions:
        desc = "; ".join(_name_list(g) for g in collisions[:_MAX_NAMED])
        raise InvalidParameterError(
            "candidates",
            f"{sum(len(g) for g in collisions)} candidates with identical Bloom filters in every cohort",
            f"candidates that can be told apart; these collide: {desc} (drop all but one of each group, "
            "or use more bits, hashes or cohorts)",
        )
    # Cholesky of the scaled matrix Gs = D^-1 G D^-1 (unit diagonal). Its pivots are the Schur
    # complements, whose product is det(Gs): a (numerically) singular Gs fails or leaves a pivot
    # near zero. Only then run the slower QR with column pivoting, to name the dependent candidates.
    d = np.sqrt(np.diag(G))
    Gs = G / d[:, None] / d[None, :]
    try:
        chol = linalg.cholesky(Gs, lower=False, check_finite=False)
        singular = float(np.min(np.diag(chol))) ** 2 <= _RANK_RTOL
    except linalg.LinAlgError:
        singular = True
    if singular:
        _, R, piv = linalg.qr(Gs, mode="economic", pivoting=True)
        diag = np.abs(np.diag(R))
        rank = min(int(np.count_nonzero(diag > _RANK_RTOL * diag[0])), M - 1)
        dependent = [candidates[i] for i in piv[rank:]]
        raise InvalidParameterError(
            "candidates",
            f"{M} candidates",
            f"a dictionary whose Bloom columns are linearly independent: only {rank} of {M} are "
            f"identifiable; these are (nearly) linear combinations of the others: {_name_list(dependent)}",
        )
    Gs_inv = linalg.cho_solve((chol, False), np.eye(M), check_finite=False)
    return np.asarray(Gs_inv / d[:, None] / d[None, :])


def estimate_rappor_candidates(
    params: RapporParams,
    acc: BitCountAccumulator | BitsView,
    *,
    campaign_id: str,
    candidates: Sequence[str],
    confidence: float = 0.95,
) -> FrequencyEstimate:
    """Counts of candidate strings from RAPPOR bit counts by weighted least squares.

    Model (CCS 2014 §4): with N_j reports in cohort j, a fraction pi_v of users holding candidate v,
    and X[(j, i), v] = 1 iff v's Bloom filter in cohort j sets bit i,

        E[c_ij] = N_j (p* + (q* - p*) sum_v pi_v X[(j, i), v]),   i.e.   E[t_ij] = N_j (X pi)_ij

    for the debiased counts t_ij of :func:`estimate_rappor_bits`. pi is estimated by WLS of the debiased
    bit proportions y_ij = t_ij / N_j on X with weights proportional to N_j, i.e. the inverse variance
    N_j (q*-p*)^2 / (p*(1-p*)) of a bit no candidate sets (exact for most bits, and within a factor
    p*(1-p*) / (q*(1-q*)) of it for the rest; 1.15 at RAPPOR's defaults). The normal equations are

        (sum_j N_j X_j' X_j) pi_hat = sum_j X_j' t_j.

    The weights do not depend on the bit counts, so pi_hat is linear in them and exactly unbiased (a
    plug-in weight r(1-r) per bit would correlate weights with noise). Its covariance is the WLS
    sandwich G^-1 (X' diag(Var t) X) G^-1 with G the matrix above and Var t_ij = N_j r(1-r)/(q*-p*)^2
    at the fitted rate r = clamp(p* + (q*-p*) (X pi_hat)_ij, p*, q*) (the §2 bit variance; it includes
    the randomness of users' cohort assignment). counts = pi_hat * n, std_error = n * SE(pi_hat),
    interval count +/- z * std_error (normal; pi_hat is a weighted sum of many independent bits).

    This is the unpenalised refit step of RAPPOR decoding; it assumes every reported string is among
    the candidates (strings outside the dictionary bias the estimates). LASSO selection is separate.

    Raises:
        InvalidParameterError: empty, non-string or duplicate candidates; a dictionary that is not
            identifiable (more candidates than cohort-bits with reports, candidates with identical Bloom
            filters in every cohort, which the message names, or other linear dependence, with the rank).
        InvalidReportError: ``acc`` is not the (m, k) bit accumulator of ``params`` (or bit sums of its
            shape: any :class:`~ldp_client.spec.BitsView`).
        NoReportsError: the accumulator is empty.
    """
    from scipy import sparse

    if not isinstance(params, RapporParams):
        raise InvalidParameterError("params", getattr(params, "name", params), "RapporParams")
    z = normal_quantile(confidence)
    cands = _check_candidates(candidates)
    bits = _bits_view(params, acc)
    n = bits.n
    if n == 0:
        raise NoReportsError(0)
    k = params.k
    used = bits.cohort_reports > 0
    # Before the design and its M x M normal matrix (seconds and GBs at M = 10^4): refused anyway.
    _check_rows(len(cands), int(used.sum()) * k)
    pos = rappor_design(params, campaign_id, cands)
    X = _design_matrix(pos, k, used)
    N_row = np.repeat(bits.cohort_reports.astype(np.float64), k)
    G = np.asarray((X.T @ sparse.diags(N_row) @ X).toarray())
    G_inv = _identifiable_inverse(X, G, cands, int(used.sum()) * k)

    t_hat, _ = _rappor_bit_arrays(params, bits)
    pi_hat = G_inv @ (X.T @ t_hat.ravel())

    ps, qs = params.prob_one_if_clear, params.prob_one_if_set
    delta = qs - ps
    r = np.clip(ps + delta * (X @ pi_hat), min(ps, qs), max(ps, qs))
    var_t = N_row * r * (1.0 - r) / (delta * delta)
    meat = np.asarray((X.T @ sparse.diags(var_t) @ X).toarray())
    var_pi = np.einsum("ij,ji->i", G_inv @ meat, G_inv)
    se_pi = np.sqrt(np.maximum(var_pi, 0.0))

    count = pi_hat * n
    std_error = se_pi * n
    res = OracleArrays(
        count=count, std_error=std_error, ci_low=count - z * std_error, ci_high=count + z * std_error
    )
    return FrequencyEstimate(
        mechanism=params.name,
        n=n,
        epsilon=params.epsilon,
        epsilon_inf=params.epsilon_inf,
        confidence=float(confidence),
        items=_items(cands, res, n),
    )
