"""The sketches' hashing: strings of any length into k rows of m buckets, keyed by the campaign id.

Written down exactly (``docs/sketches.md`` has test vectors) so that a client in any language computes the
same buckets as the server:

1. **Fingerprint** of a value v (any string, as UTF-8 bytes):
   ``x = u64le(SHA-256(b"ldp.v1 sketch value" || 0x00 || UTF-8(v))[0:8])``, split into two 32-bit halves
   ``x_lo = x mod 2**32`` and ``x_hi = x >> 32``.
2. **Row keys** of campaign c, row j in [0, k): ``K = SHA-256(b"ldp.v1 sketch row" || 0x00 || u32le(len(C))
   || C || u32le(j))`` with ``C = UTF-8(c)``; ``a0 = u64le(K[0:8])``, ``a1 = u64le(K[8:16])``,
   ``b = u64le(K[16:24])``.
3. **Hash** of v in row j: ``h_j(v) = ((a0 x_lo + a1 x_hi + b) mod 2**64) >> 32`` (a 32-bit value), and its
   **bucket** ``bucket_j(v) = (h_j(v) m) >> 32`` in [0, m).

Why this family. Step 3 is vector multiply-shift hashing of the two 32-bit halves, with keys a0, a1, b
uniform in [0, 2**64): it is strongly universal (two distinct keys x != y get independent, uniform 32-bit
values) because 64 >= 32 + 32 - 1 (Dietzfelbinger 1996, "Universal hashing and k-wise independent random
variables via integer arithmetic without primes"; Thorup 2015, "High Speed Hashing for Integers and
Strings", vector multiply-shift). Over campaigns, whose ids give independent pseudo-random keys, two
strings with different fingerprints fall into one bucket of a row with probability exactly
S = sum_y P(bucket y)^2 (:func:`collision_mass`: 1/m when m is a power of two, 1/m + O(m/2**64)
otherwise), independently across rows: the random-hash model the estimator assumes. Two strings share a
fingerprint (and so every bucket) with probability 2**-64. The server evaluates step 3 for every
candidate and row with a handful of uint64 numpy operations (:func:`candidate_buckets`); step 1 is one
SHA-256 per candidate, cached per candidate list.

Importing this module does not import numpy.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING

from ldp_client._oracle_math import hash_collision_mass
from ldp_client.errors import InvalidParameterError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "ROW_LABEL",
    "VALUE_LABEL",
    "RowKey",
    "bucket",
    "candidate_buckets",
    "collision_mass",
    "fingerprint",
    "fingerprints",
    "hash_buckets",
    "key_arrays",
    "row_buckets",
    "row_key",
    "row_keys",
    "value_bytes",
]

VALUE_LABEL = b"ldp.v1 sketch value\x00"
"""Domain separation of the fingerprint's SHA-256 input."""
ROW_LABEL = b"ldp.v1 sketch row\x00"
"""Domain separation of the row keys' SHA-256 input."""

_M32 = (1 << 32) - 1
_M64 = (1 << 64) - 1
_sha256 = hashlib.sha256

RowKey = tuple[int, int, int]
"""(a0, a1, b): the three 64-bit words of one row's hash."""


def value_bytes(
    field: str, value: object, error: Callable[[str, object, str], Exception] = InvalidParameterError
) -> bytes:
    """The UTF-8 bytes of a string value; ``error(field, value, allowed)`` otherwise (an LdpError class)."""
    if not isinstance(value, str):
        raise error(field, value, "a string (any length, encodable as UTF-8)")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise error(field, value, "a string encodable as UTF-8 (no lone surrogates)") from None


def fingerprint(data: bytes) -> int:
    """The 64-bit fingerprint of a value's UTF-8 bytes (step 1 of the module docstring)."""
    return int.from_bytes(_sha256(VALUE_LABEL + data).digest()[:8], "little")


def row_key(campaign_id: str, row: int) -> RowKey:
    """(a0, a1, b) of row ``row`` of campaign ``campaign_id`` (step 2 of the module docstring)."""
    c = value_bytes("campaign_id", campaign_id)
    digest = _sha256(ROW_LABEL + len(c).to_bytes(4, "little") + c + row.to_bytes(4, "little")).digest()
    return (
        int.from_bytes(digest[0:8], "little"),
        int.from_bytes(digest[8:16], "little"),
        int.from_bytes(digest[16:24], "little"),
    )


@functools.lru_cache(maxsize=16)
def row_keys(campaign_id: str, k: int) -> tuple[RowKey, ...]:
    """The keys of rows 0..k-1 of a campaign, computed once per (campaign, k)."""
    return tuple(row_key(campaign_id, j) for j in range(k))


def bucket(key: RowKey, fp: int, m: int) -> int:
    """bucket_j(v) in [0, m) of a fingerprint under one row's key (step 3 of the module docstring)."""
    a0, a1, b = key
    h = ((a0 * (fp & _M32) + a1 * (fp >> 32) + b) & _M64) >> 32
    return (h * m) >> 32


def collision_mass(m: int) -> Fraction:
    """S: the probability that two strings with different fingerprints share a row's bucket, exactly.

    The 32-bit hash values are uniform and pairwise independent, and ``(h m) >> 32`` gives each bucket
    floor(2**32/m) or that plus one of them (:func:`ldp_client._oracle_math.hash_collision_mass`)."""
    return hash_collision_mass(m)


# ----------------------------------------------------------------------------------- server (numpy)


@functools.lru_cache(maxsize=4)
def fingerprints(values: tuple[str, ...]) -> NDArray[np.uint64]:
    """Fingerprints of many strings (uint64, read-only), cached for the last few lists (a candidate list
    is hashed once, whatever the campaign). Raises InvalidParameterError naming a bad candidate."""
    import numpy as np

    out = np.empty(len(values), dtype=np.uint64)
    for i, v in enumerate(values):
        out[i] = fingerprint(value_bytes(f"candidates[{i}]", v))
    out.setflags(write=False)
    return out


def key_arrays(campaign_id: str, k: int) -> tuple[NDArray[np.uint64], NDArray[np.uint64], NDArray[np.uint64]]:
    """The row keys of a campaign as three uint64 arrays (a0, a1, b), each of length k."""
    import numpy as np

    keys = np.array(row_keys(campaign_id, k), dtype=np.uint64).reshape(k, 3)
    return keys[:, 0], keys[:, 1], keys[:, 2]


def hash_buckets(
    fps: NDArray[np.uint64],
    a0: NDArray[np.uint64] | np.uint64,
    a1: NDArray[np.uint64] | np.uint64,
    b: NDArray[np.uint64] | np.uint64,
    m: int,
) -> NDArray[np.int64]:
    """Buckets of fingerprints under row keys, broadcasting (numpy's uint64 arithmetic wraps mod 2**64)."""
    import numpy as np

    lo = fps & np.uint64(_M32)
    hi = fps >> np.uint64(32)
    h = (a0 * lo + a1 * hi + b) >> np.uint64(32)
    out: NDArray[np.int64] = ((h * np.uint64(m)) >> np.uint64(32)).astype(np.int64)
    return out


def row_buckets(campaign_id: str, k: int, m: int, candidates: Sequence[str]) -> Iterator[NDArray[np.int64]]:
    """bucket_j(v) of every candidate v, one int64 array (M,) per row j = 0..k-1 in turn.

    One fingerprint per candidate (cached), then per row a few vectorised uint64 operations over all the
    candidates: no Python loop per (candidate, row), and no (M, k) table (512 MiB at 10^6 x 64)."""
    fps = fingerprints(tuple(candidates))
    a0, a1, b = key_arrays(campaign_id, k)
    for j in range(k):
        yield hash_buckets(fps, a0[j], a1[j], b[j], m)


def candidate_buckets(campaign_id: str, k: int, m: int, candidates: Sequence[str]) -> NDArray[np.int64]:
    """bucket_j(v) of every candidate v (rows of the result) in every row j (columns): int64 (M, k)."""
    import numpy as np

    out = np.empty((len(candidates), k), dtype=np.int64)
    for j, buckets in enumerate(row_buckets(campaign_id, k, m, candidates)):
        out[:, j] = buckets
    return out
