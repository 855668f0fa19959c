"""TreeHist: parameters, digests, the device's encoder and the server's support counts (the method: the
package docstring)."""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, NamedTuple

from ldp_client import privacy
from ldp_client import randomness as _rnd
from ldp_client._oracle_math import grr_like_threshold
from ldp_client._prob import PROB_ONE, threshold_to_probability
from ldp_client.domain import check_epsilon, int_field, report_quantization
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.olh import truth_threshold
from ldp_client.mechanisms.pem.core import (
    MAX_LEVEL_CANDIDATES,
    Prefix,
    PrefixHasher,
    check_tree_fields,
    default_start_bits,
    label_digests,
    make_tree_params,
    prefix_digest,
    tree_levels,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ldp_client.secret import ClientSecret

__all__ = [
    "TreeHistEncoder",
    "TreeHistParams",
    "TreeHistReport",
    "direct_support",
    "group_of",
    "hadamard_answer",
    "hadamard_support_table",
    "level_digest",
]

MAX_HADAMARD_BITS: Final = 10
MIN_HASH_BITS: Final = 8
MAX_HASH_BITS: Final = 24
DEFAULT_MAX_HADAMARD_BITS: Final = 8
"""from_epsilon's largest t: the server adds 2**t histogram entries per report (about 10 s per 10**7
reports at t = 8 on one core), and beyond it the variance gains little against the sampling term."""
GROUP_LABEL: Final = b"ldp-treehist-group\x00"
_PERSON: Final = b"ldp-treehist"
_M64 = (1 << 64) - 1
_from_bytes = int.from_bytes
_uniform_below = _rnd.uniform_below


@dataclass(frozen=True, kw_only=True)
class TreeHistParams:
    """TreeHist over byte strings of 1 to ``max_length`` bytes (package docstring).

    Attributes:
        max_length: longest value in bytes (1..64).
        start_bits: bits of the value in level 0's prefixes (1..16, max_length * 2**start_bits <= 2**16).
        step_bits: bits added per later level (1..12).
        top_k: candidates kept per level, 1..2**16 / 2**step_bits (the level budget).
        hadamard_bits: t, answer bits per report (1..10): t Hadamard rows, g = 2**t possible answers; t = 1
            is the one-bit response of Bassily et al.
        hash_bits: m, bits of the discovery levels' digests (8..24): the server's transform has 2**m
            entries.
        truth_probability: P(the reported answer is the true one), in (1/g, 1), quantized to 2**-32.
    """

    name: ClassVar[str] = "treehist"
    max_length: int
    start_bits: int
    step_bits: int
    top_k: int
    hadamard_bits: int
    hash_bits: int
    truth_probability: float
    truth_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_tree_fields(self.max_length, self.start_bits, self.step_bits, self.top_k)
        int_field("hadamard_bits", self.hadamard_bits, 1, MAX_HADAMARD_BITS)
        int_field("hash_bits", self.hash_bits, MIN_HASH_BITS, MAX_HASH_BITS)
        object.__setattr__(self, "truth_threshold", truth_threshold(self.g, self.truth_probability))

    @property
    def g(self) -> int:
        """Possible answers: 2**hadamard_bits."""
        return 1 << self.hadamard_bits

    @property
    def p_star(self) -> float:
        return threshold_to_probability(self.truth_threshold)

    @property
    def q_star(self) -> float:
        """1/g exactly: for distinct digests D != D', A D = A D' with probability 2**-t over uniform rows."""
        return 1.0 / self.g

    @property
    def epsilon(self) -> float:
        """ln(p (g - 1)/(1 - p)): given the rows, the answer is g-ary randomized response. Of one report and
        of the user (one report per campaign)."""
        return privacy.grr_epsilon(self.p_star, self.g)

    @property
    def levels(self) -> int:
        """G discovery levels: 1 + ceil((8 max_length - start_bits) / step_bits)."""
        return tree_levels(self.max_length, self.start_bits, self.step_bits)

    @property
    def groups(self) -> int:
        """G + 1: the discovery levels and the verification level G."""
        return self.levels + 1

    def prefix_bits(self, level: int) -> int:
        """s_level: the value bits a prefix of ``level`` holds (8 max_length at G - 1 and G)."""
        return min(self.start_bits + level * self.step_bits, 8 * self.max_length)

    @classmethod
    def from_epsilon(
        cls,
        epsilon: float,
        *,
        max_length: int = 16,
        top_k: int = 32,
        start_bits: int | None = None,
        step_bits: int = 8,
        hadamard_bits: int | None = None,
        hash_bits: int = 20,
    ) -> TreeHistParams:
        """TreeHist at ``epsilon``: t (by default) the one of 1..8 with the least variance factor
        q*(1 - q*)/(p* - q*)^2 at the quantized p = e^eps/(e^eps + 2**t - 1); start_bits 8 (less when the
        budget or the length says so); step_bits 8 (one byte per level: the server's cost does not grow with
        the candidates, so wide steps and few levels)."""
        eps = check_epsilon(epsilon)
        if hadamard_bits is None:
            hadamard_bits = _best_hadamard_bits(eps)
        int_field("hadamard_bits", hadamard_bits, 1, MAX_HADAMARD_BITS)
        int_field("top_k", top_k, 1, MAX_LEVEL_CANDIDATES)
        if start_bits is None:
            start_bits = default_start_bits(max_length)
        g = 1 << hadamard_bits
        t = grr_like_threshold(g, eps)
        if t == 0:
            raise InvalidParameterError(
                "epsilon", epsilon, f"a value large enough at hadamard_bits={hadamard_bits}"
            )
        params = cls(
            max_length=max_length,
            start_bits=start_bits,
            step_bits=step_bits,
            top_k=top_k,
            hadamard_bits=hadamard_bits,
            hash_bits=hash_bits,
            truth_probability=threshold_to_probability(t),
        )
        report_quantization(eps, params.epsilon)
        return params


def _best_hadamard_bits(epsilon: float) -> int:
    best, best_v = 1, math.inf
    for bits in range(1, DEFAULT_MAX_HADAMARD_BITS + 1):
        g = 1 << bits
        t = grr_like_threshold(g, epsilon)
        if t == 0:
            continue
        p, q = t / PROB_ONE, 1.0 / g
        v = q * (1 - q) / (p - q) ** 2
        if v < best_v:
            best, best_v = bits, v
    return best


_FIELDS: Final = ("max_length", "start_bits", "step_bits", "top_k", "hadamard_bits", "hash_bits")


def _make(*, epsilon: float | None, fields: dict[str, object]) -> TreeHistParams:
    params: TreeHistParams = make_tree_params(TreeHistParams, _FIELDS, epsilon=epsilon, fields=fields)
    return params


# ------------------------------------------------------------------------------------------- digests


def level_digest(params: TreeHistParams, level: int, prefix: Prefix) -> int:
    """D: BLAKE2b-64 (person ``ldp-treehist``) of level (2 bytes) || length (1 byte) || the prefix bits
    (ceil(s/8) bytes, big-endian), little-endian (:func:`ldp_client.mechanisms.pem.prefix_digest`); its low
    ``hash_bits`` bits at a discovery level (level < G), all 64 at the verification level G."""
    d = prefix_digest(level, params.prefix_bits(level), prefix, _PERSON)
    return d if level == params.levels else d & ((1 << params.hash_bits) - 1)


def hadamard_answer(rows: Sequence[int], digest: int) -> int:
    """A D over GF(2): bit k is the parity of rows[k] & D (the Hadamard entry H[rows[k], D] as a bit)."""
    y = 0
    for k, r in enumerate(rows):
        y |= ((r & digest).bit_count() & 1) << k
    return y


def group_of(params: TreeHistParams, campaign_id: str, secret: ClientSecret) -> int:
    """The device's group: HMAC-SHA256(secret, GROUP_LABEL || campaign id), first 8 bytes, mod G + 1 (the
    modulo bias is below (G + 1)/2**64)."""
    return _from_bytes(secret.prf(GROUP_LABEL + campaign_id.encode("utf-8"))[:8], "big") % params.groups


class TreeHistReport(NamedTuple):
    """One report: the group (its level), the t rows (64-bit words) and the answer in [0, 2**t)."""

    group: int
    rows: tuple[int, ...]
    answer: int


class TreeHistEncoder:
    """Encodes a device's values for its group's level with the OS CSPRNG."""

    __slots__ = ("_group", "_mask", "_nbytes", "_prefix", "_t", "_truth", "_unpack", "params")

    def __init__(self, params: TreeHistParams, *, group: int) -> None:
        if not isinstance(params, TreeHistParams):
            raise InvalidParameterError("params", type(params).__name__, "TreeHistParams")
        int_field("group", group, 0, params.groups - 1)
        self.params = params
        self._group = group
        self._t = params.hadamard_bits
        self._truth = params.truth_threshold
        self._mask = _M64 if group == params.levels else (1 << params.hash_bits) - 1
        self._prefix = PrefixHasher(params, group, _PERSON)
        # One CSPRNG read per report: t rows (u64), a 32-bit coin and a 32-bit word for the other answer.
        self._nbytes = 8 * params.hadamard_bits + 8
        self._unpack = struct.Struct(f"<{params.hadamard_bits}QII").unpack

    def __repr__(self) -> str:
        return f"TreeHistEncoder(params={self.params!r}, group=<hidden>)"

    def encode(self, value: str | bytes) -> TreeHistReport:
        """Randomize one value (str as UTF-8, or bytes; 1 to max_length bytes).

        Raises:
            DomainError: empty, too long, or neither str nor bytes.
        """
        digest = self._prefix.digest(value) & self._mask
        t = self._t
        words = self._unpack(_rnd._source(self._nbytes))
        rows = words[:t]
        y = 0
        bit = 1
        for r in rows:
            if (r & digest).bit_count() & 1:
                y |= bit
            bit <<= 1
        if words[t] < self._truth:
            return TreeHistReport(self._group, rows, y)
        other = _uniform_below((1 << t) - 1, words[t + 1])
        return TreeHistReport(self._group, rows, other + 1 if other >= y else other)


# ---------------------------------------------------------------------------------------------- server


def fwht(values: NDArray[Any]) -> None:
    """In place: values[D] <- sum_r values[r] (-1)^popcount(r & D) (the Walsh-Hadamard transform in natural
    order, exact in integers), length a power of two; two levels per numpy pass (radix 4) where it can."""
    import numpy as np

    n = values.shape[0]
    h = 1
    while h << 1 < n:
        v = values.reshape(-1, 4, h)
        a0, a1, a2, a3 = v[:, 0, :], v[:, 1, :], v[:, 2, :], v[:, 3, :]
        s01, d01 = a0 + a1, a0 - a1
        s23, d23 = a2 + a3, a2 - a3
        # The 4-point transform of (a0, a1, a2, a3): the two one-level butterflies, then the level above.
        np.add(s01, s23, out=a0)
        np.add(d01, d23, out=a1)
        np.subtract(s01, s23, out=a2)
        np.subtract(d01, d23, out=a3)
        h <<= 2
    if h < n:
        v = values.reshape(-1, 2, h)
        x = v[:, 0, :].copy()
        v[:, 0, :] += v[:, 1, :]
        np.subtract(x, v[:, 1, :], out=v[:, 1, :])


def hadamard_support_table(
    rows: NDArray[np.uint64], answers: NDArray[Any], hash_bits: int
) -> NDArray[np.int64]:
    """C(D) for every m-bit digest D at once: the reports (A, y) with A D = y.

    1[A D = y] = 2**-t sum_{s in {0,1}^t} (-1)^(s.y) (-1)^((A^T s).D), so the histogram
    W[r] = sum over reports and s with A^T s = r of (-1)^(s.y) gives, after one Walsh-Hadamard transform,
    2**t C(D) at every D: O(n 2**t + m 2**m) whatever the number of candidates (package docstring).
    """
    import numpy as np

    size = 1 << hash_bits
    n, t = (rows.shape[0], rows.shape[1]) if rows.ndim == 2 else (0, 0)
    hist = np.zeros(2 * size, dtype=np.int64)
    if n:
        # Entry (report, s) of the histogram as one key: 2 (A^T s) + parity(s & y); built by doubling over
        # the rows, XOR-ing e_k = 2 (r_k mod 2**m) + y_k into the half where s_k = 1.
        e = ((rows & np.uint64(size - 1)) << np.uint64(1)).astype(np.int32)
        e |= ((np.asarray(answers, dtype=np.int32)[:, None] >> np.arange(t, dtype=np.int32)) & 1).astype(
            np.int32
        )
        # Entries per bincount call: at least the histogram's length, so its allocation is amortized.
        chunk = max(1, max(1 << 22, 2 * size) >> t)
        keys = np.empty((min(chunk, n), 1 << t), dtype=np.int32)
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            kk = keys[: stop - start]
            kk[:, 0] = 0
            for k in range(t):
                np.bitwise_xor(kk[:, : 1 << k], e[start:stop, k : k + 1], out=kk[:, 1 << k : 2 << k])
            hist += np.bincount(kk.ravel(), minlength=2 * size)
    # |W| and every transformed value are at most n 2**t: int32 halves the transform's memory traffic.
    w = hist[0::2] - hist[1::2]
    if n << t < 1 << 31:
        w = w.astype(np.int32)
    fwht(w)
    return (w >> t if n else w).astype(np.int64)


def direct_support(
    rows: NDArray[np.uint64], answers: NDArray[Any], digests: NDArray[np.uint64]
) -> NDArray[np.int64]:
    """C(D) for each given 64-bit digest: A D = y evaluated report by report (numpy, blocked); the
    verification level's few candidates."""
    import numpy as np

    counts = np.zeros(digests.shape[0], dtype=np.int64)
    n = rows.shape[0]
    if n == 0 or digests.shape[0] == 0:
        return counts
    t = rows.shape[1]
    y = np.asarray(answers, dtype=np.uint16)
    block = max(1, (1 << 18) // digests.shape[0])
    for start in range(0, n, block):
        stop = min(n, start + block)
        acc = np.zeros((stop - start, digests.shape[0]), dtype=np.uint16)
        for k in range(t):
            par = np.bitwise_count(rows[start:stop, k, None] & digests[None, :]) & np.uint8(1)
            acc |= par.astype(np.uint16) << np.uint16(k)
        counts += np.count_nonzero(acc == y[start:stop, None], axis=0)
    return counts


@functools.lru_cache(maxsize=8)
def _label_digests(params: TreeHistParams, labels: tuple[str, ...]) -> Any:
    """(n_labels, G + 1) uint64 digests of each label's prefix at each level (simulation)."""
    import numpy as np

    keys = label_digests(params, labels, params.groups, _PERSON)
    # level_digest keeps the low hash_bits of a discovery level's digest, all 64 at the verification level.
    keys[:, : params.levels] &= np.uint64((1 << params.hash_bits) - 1)
    return keys
