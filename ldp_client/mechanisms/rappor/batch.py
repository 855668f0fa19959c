"""RAPPOR's batch encoders, for simulation: one report per simulated user from a seeded numpy Generator.

Each row is a distinct user whose permanent randomized response is drawn fresh from the generator, which
is equal in distribution to the HMAC derivation of a user with a fresh uniformly random secret
(HMAC-SHA256 modelled as a PRF). Bloom filters are exactly those of the per-report path
(:mod:`ldp_client.mechanisms.rappor.encoding`), and the thresholds are the same quantized ones.

Importing this module does not import numpy; every function imports it when called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ldp_client._prob import PROB_ONE
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.mechanisms.rappor.encoding import _bloom_from_msg, _campaign_bytes, _lp, _u32, _utf8
from ldp_client.mechanisms.rappor.params import BasicRapporParams, BooleanRapporParams, RapporParams

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["encode_batch_basic", "encode_batch_boolean", "encode_batch_rappor"]


def _int_vector(name: str, values: object, n: int | None, hi: int) -> NDArray[np.int64]:
    import numpy as np

    arr = np.asarray(values)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise InvalidParameterError(name, (arr.shape, str(arr.dtype)), "a 1-D integer array")
    if n is not None and arr.shape[0] != n:
        raise InvalidParameterError(name, arr.shape, f"shape ({n},) like values")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= hi):
        bad = int(arr.min()) if int(arr.min()) < 0 else int(arr.max())
        raise DomainError(name, bad, f"integers in [0, {hi - 1}]")
    return arr.astype(np.int64, copy=False)


def _rappor_noise_packed(
    bloom: NDArray[np.uint8], params: RapporParams | BasicRapporParams | BooleanRapporParams, k: int, rng: Any
) -> NDArray[np.uint8]:
    """PRR then IRR on packed rows, each row a fresh simulated user (PRR drawn from ``rng``).

    Same construction and quantized thresholds as the per-report path: PRR = (R & V) | (~R & B) with
    R ~ Bernoulli(F/2**32), V fair; S = (PRR & Bq) | (~PRR & Bp).
    """
    import numpy as np

    from ldp_client._npbits import bernoulli_packed

    n = bloom.shape[0]
    out = bloom.copy()
    if params.f_threshold:
        r = bernoulli_packed(params.f_threshold, n, k, rng)
        v = bernoulli_packed(PROB_ONE // 2, n, k, rng)
        # PRR = B ^ (R & (V ^ B)): where R is set take V, else keep B.
        np.bitwise_xor(v, out, out=v)
        np.bitwise_and(v, r, out=v)
        np.bitwise_xor(out, v, out=out)
    bq = bernoulli_packed(params.q_threshold, n, k, rng)
    bp = bernoulli_packed(params.p_threshold, n, k, rng)
    # S = Bp ^ (PRR & (Bq ^ Bp)).
    np.bitwise_xor(bq, bp, out=bq)
    np.bitwise_and(out, bq, out=out)
    np.bitwise_xor(out, bp, out=out)
    return out


def encode_batch_rappor(
    params: RapporParams,
    *,
    campaign_id: str,
    values: NDArray[np.integer[Any]],
    labels: Sequence[str],
    rng: np.random.Generator,
    cohorts: NDArray[np.integer[Any]] | None = None,
) -> tuple[NDArray[np.uint32], NDArray[np.uint8]]:
    """String-RAPPOR reports of n simulated users, one report each. For simulation only.

    Each row is a distinct user: its PRR is drawn fresh from ``rng``, which is equal in distribution to
    the HMAC derivation of a user with a fresh uniformly random secret (HMAC-SHA256 modelled as a PRF).
    Bloom filters are exactly those of the per-report path (:func:`bloom_positions`), computed once per
    distinct (label, cohort) present in the batch.

    Args:
        params: RAPPOR parameters.
        campaign_id: The campaign id (enters the Bloom hashing).
        values: Integer indices into ``labels``, shape (n,).
        labels: The strings the indices refer to.
        rng: Seeded generator.
        cohorts: Cohort of each user, shape (n,), in [0, m); uniform from ``rng`` when None.

    Returns:
        (cohorts uint32 (n,), bits uint8 (n, ceil(k/8)) packed with little bit order).
    """
    import numpy as np

    if not isinstance(params, RapporParams):
        raise InvalidParameterError("params", type(params).__name__, "a RapporParams")
    c = _campaign_bytes(campaign_id)
    if isinstance(labels, str | bytes) or not isinstance(labels, Sequence):
        raise InvalidParameterError("labels", type(labels).__name__, "a sequence of str")
    n_labels = len(labels)
    if n_labels == 0:
        raise InvalidParameterError("labels", labels, "a non-empty sequence of str")
    vals = _int_vector("values", values, None, n_labels)
    n = vals.shape[0]
    m, k, h = params.m, params.k, params.h
    coh: NDArray[np.uint32]
    if cohorts is None:
        coh = np.asarray(rng.integers(0, m, size=n, dtype=np.uint32))
    else:
        coh = _int_vector("cohorts", cohorts, n, m).astype(np.uint32)
    nb = params.num_bytes

    # Distinct (label, cohort) pairs, by a dense presence table when it is small, else by sorting.
    key = vals * m + coh
    space = n_labels * m
    if space <= max(1 << 22, 4 * n):
        present = np.zeros(space, dtype=bool)
        present[key] = True
        uniq = np.flatnonzero(present)
        slot = np.zeros(space, dtype=np.int64)
        slot[uniq] = np.arange(uniq.size)
        inverse = slot[key]
    else:
        uniq, inverse = np.unique(key, return_inverse=True)

    prefix = _lp("campaign_id", c)
    cohort_prefix: dict[int, bytes] = {}
    label_part: dict[int, bytes] = {}
    rows: list[bytes] = []
    for pair in uniq.tolist():
        li, ci = divmod(pair, m)
        lp_value = label_part.get(li)
        if lp_value is None:
            lp_value = label_part[li] = _lp("labels", _utf8("labels", labels[li], DomainError))
        cp = cohort_prefix.get(ci)
        if cp is None:
            cp = cohort_prefix[ci] = prefix + _u32(ci)
        rows.append(_bloom_from_msg(cp + lp_value, k, h).to_bytes(nb, "little"))
    table = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), nb)
    bits = _rappor_noise_packed(table[inverse], params, k, rng)
    return coh, bits


def encode_batch_basic(
    params: BasicRapporParams, values: NDArray[np.integer[Any]], rng: np.random.Generator
) -> NDArray[np.uint8]:
    """Basic-RAPPOR reports of n simulated users (one each, fresh PRR from ``rng``). For simulation only.

    Args:
        params: Basic RAPPOR parameters (k = d).
        values: Domain indices, shape (n,).
        rng: Seeded generator.

    Returns:
        uint8 (n, ceil(d/8)), bit i of row r set iff report r has bit i.
    """
    import numpy as np

    if not isinstance(params, BasicRapporParams):
        raise InvalidParameterError("params", type(params).__name__, "a BasicRapporParams")
    k = params.k
    vals = _int_vector("values", values, None, k)
    n = vals.shape[0]
    bloom = np.zeros((n, params.num_bytes), dtype=np.uint8)
    bloom[np.arange(n), vals >> 3] = np.left_shift(1, vals & 7).astype(np.uint8)
    return _rappor_noise_packed(bloom, params, k, rng)


def encode_batch_boolean(
    params: BooleanRapporParams, values: NDArray[np.generic], rng: np.random.Generator
) -> NDArray[np.uint8]:
    """Boolean-RAPPOR reports of n simulated users (one each, fresh PRR from ``rng``). For simulation only.

    Args:
        params: Boolean RAPPOR parameters.
        values: bool array (or integers 0/1), shape (n,).
        rng: Seeded generator.

    Returns:
        uint8 (n, 1) with the report bit in bit 0.
    """
    import numpy as np

    if not isinstance(params, BooleanRapporParams):
        raise InvalidParameterError("params", type(params).__name__, "a BooleanRapporParams")
    arr = np.asarray(values)
    if arr.dtype.kind == "b" and arr.ndim == 1:
        vals = arr.astype(np.uint8)
    else:
        vals = _int_vector("values", arr, None, 2).astype(np.uint8)
    return _rappor_noise_packed(vals.reshape(-1, 1), params, 1, rng)
