"""Wide random bit vectors from few CSPRNG bytes, in pure Python: per-report samplers of UE and SS.

On this project's machines ``os.urandom`` delivers about 200 MB/s, so a per-report encoder's cost is set
by how many random bytes it asks for: the binary-expansion sampler of :mod:`ldp_client._prob` needs one
random word per binary digit of the probability (31 words of d bits = 4 KB per report for a typical
non-dyadic q at d = 1024, about 20 us). The samplers here use about one random byte per position:

* :class:`ByteBernoulli`: ``width`` independent Bernoulli(T / 2**32) bits. Write T = t1 2**24 + r with
  t1 = T >> 24 and r < 2**24. Position i draws a uniform byte K_i; its bit is 1 if K_i < t1, 0 if
  K_i > t1, and on a tie (K_i == t1, probability 1/256) it is 1 iff a fresh uniform 24-bit word is
  < r. So P(bit = 1) = t1/256 + (1/256)(r/2**24) = T/2**32 exactly (a lexicographic comparison of a
  uniform 32-bit word with T, evaluated lazily), independently across positions.
* :func:`uniform_subset`: a uniformly random k-subset of ``m`` positions. Position i draws a uniform byte
  key K_i. With c(t) the number of keys below t, the byte value t with c(t) <= k <= c(t + 1) is found;
  every position with a key below t is taken and the remaining k - c(t) are drawn uniformly (partial
  Fisher-Yates with Lemire's unbiased bounded integers) from the positions whose key equals t. Every
  step is equivariant under permutations of the positions and the keys are exchangeable, so the law of
  the selected set is invariant under all permutations; it always has exactly k elements and the
  symmetric group acts transitively on k-subsets, so it is uniform.

Both return the vector as a Python int (bit i = position i), built with ``bytes.translate`` into ASCII
'0'/'1' and one ``int(..., 2)``: linear-time C operations, no Python loop over positions (the only loops
are over ties, about width/256 of them). Randomness comes only from ``ldp_client.randomness._source``
(the OS CSPRNG; tests substitute it).
"""

from __future__ import annotations

from ldp_client import randomness as _rnd
from ldp_client._prob import PROB_ONE
from ldp_client.errors import InvalidParameterError

__all__ = ["SUBSET_SPARE", "ByteBernoulli", "subset_from_keys", "uniform_subset"]

_ZERO = 48  # ord("0")
_ONE = 49  # ord("1")
# _ASCII_BELOW[t]: translation table mapping a byte b to "1" if b < t else "0" (t in 0..256).
_ASCII_BELOW = tuple(bytes(_ONE if b < t else _ZERO for b in range(256)) for t in range(257))
# _COUNT_BELOW[t]: maps b to 1 if b < t else 0, to count keys below t with bytes.count.
_COUNT_BELOW = tuple(bytes(1 if b < t else 0 for b in range(256)) for t in range(257))
_BYTE = tuple(bytes((b,)) for b in range(256))
_U24 = 1 << 24
_U32 = 1 << 32


def _bits_from_ascii(ascii_bits: bytes | bytearray) -> int:
    """Position i of the ASCII '0'/'1' string becomes bit i of the int."""
    return int(ascii_bits[::-1], 2) if ascii_bits else 0


class ByteBernoulli:
    """``width`` independent Bernoulli(threshold / 2**32) bits per call (module docstring).

    Each call draws ``width + spare`` bytes from the CSPRNG in one read, the spare bytes serving the
    24-bit tie-break words (about width/256 ties are expected; more bytes are read in the rare case the
    spare runs out).
    """

    __slots__ = ("_rest", "_spare", "_table", "_tie", "threshold", "width")

    def __init__(self, threshold: int, width: int) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, int) or not 0 <= threshold <= PROB_ONE:
            raise InvalidParameterError("threshold", threshold, f"an integer in [0, {PROB_ONE}]")
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise InvalidParameterError("width", width, "an integer >= 1")
        self.threshold = threshold
        self.width = width
        t1 = threshold >> 24
        self._rest = threshold & (_U24 - 1)
        self._table = _ASCII_BELOW[t1]
        # A tie resolves to 1 only when r > 0; with r = 0 (or T = 2**32, t1 = 256) ties need no bytes.
        self._tie = _BYTE[t1] if t1 < 256 and self._rest else None
        # Spare tie-break bytes: 3 per expected tie plus 3 * 8 (about 3 standard deviations at width 1024).
        self._spare = 3 * (width // 256 + 8) if self._tie is not None else 0

    @property
    def nbytes(self) -> int:
        """Bytes read from the CSPRNG per call (more only if the spare runs out)."""
        return self.width + self._spare

    def sample(self) -> int:
        """One vector: bit i is 1 with probability exactly threshold / 2**32, independently."""
        return self._from(_rnd._source(self.width + self._spare), 0)

    def sample_with_word(self) -> tuple[int, int]:
        """A vector and an independent uniform 32-bit word, from the same single CSPRNG read (the word
        is read from the first 4 bytes, the keys and tie-break words after it)."""
        buf = _rnd._source(4 + self.width + self._spare)
        return self._from(buf, 4), int.from_bytes(buf[:4], "little")

    def _from(self, buf: bytes, start: int) -> int:
        width = self.width
        keys = buf[start : start + width] if (start or self._spare) else buf
        tie = self._tie
        if tie is None:
            return _bits_from_ascii(keys.translate(self._table))
        i = keys.find(tie)
        if i < 0:
            return _bits_from_ascii(keys.translate(self._table))
        out = bytearray(keys.translate(self._table))
        rest = self._rest
        pos = start + width
        end = len(buf)
        while i >= 0:
            if pos + 3 > end:  # the spare ran out: read more (rare)
                buf = _rnd._source(3 * 64)
                pos, end = 0, len(buf)
            if int.from_bytes(buf[pos : pos + 3], "little") < rest:
                out[i] = _ONE
            pos += 3
            i = keys.find(tie, i + 1)
        return _bits_from_ascii(out)


# Spare bytes read with the keys for tie-break words: 8 words cover the usual handful of ties.
SUBSET_SPARE = 32


def uniform_subset(m: int, k: int) -> int:
    """A uniformly random k-subset of positions 0..m-1 as an int bit mask (module docstring).

    Reads m key bytes plus :data:`SUBSET_SPARE` bytes of tie-break words in one CSPRNG call (more only if
    the ties need more words).

    Raises:
        InvalidParameterError: m < 1 or k not in [0, m].
    """
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise InvalidParameterError("m", m, "an integer >= 1")
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= m:
        raise InvalidParameterError("k", k, f"an integer in [0, {m}]")
    if k == 0:
        return 0
    if k == m:
        return (1 << m) - 1
    buf = _rnd._source(m + SUBSET_SPARE)
    return subset_from_keys(buf[:m], k, buf[m:])


def subset_from_keys(keys: bytes, k: int, spare: bytes) -> int:
    """The k-subset selected by uniform key bytes ``keys`` (module docstring), ties broken with 32-bit
    words taken from ``spare`` (then from the CSPRNG). Requires 0 < k < len(keys)."""
    m = len(keys)
    # Start near the expected threshold, jump once by the expected correction (about m/256 keys per byte
    # value), then move by single byte values (each move counts one value).
    t = min(255, (k * 256) // m)
    below = keys.translate(_COUNT_BELOW[t]).count(1)  # c(t) = number of keys < t
    jump = ((k - below) * 256) // m
    if jump:
        t = min(255, max(0, t + jump))
        below = keys.translate(_COUNT_BELOW[t]).count(1)
    while below > k:
        t -= 1
        below -= keys.count(_BYTE[t])
    while True:
        equal = keys.count(_BYTE[t])
        if below + equal >= k:
            break
        below += equal
        t += 1
    need = k - below  # 0 <= need <= equal: draw `need` of the `equal` tied positions uniformly
    if need == 0:
        return _bits_from_ascii(keys.translate(_ASCII_BELOW[t]))
    out = bytearray(keys.translate(_ASCII_BELOW[t]))
    tied: list[int] = []
    tb = _BYTE[t]
    i = keys.find(tb)
    while i >= 0:
        tied.append(i)
        i = keys.find(tb, i + 1)
    size = len(tied)
    if need == size:
        for i in tied:
            out[i] = _ONE
        return _bits_from_ascii(out)
    if 4 * need > len(spare):
        spare = spare + _rnd._source(4 * need)
    # Partial Fisher-Yates: the first `need` slots of a uniformly shuffled list of the tied positions.
    for j in range(need):
        word = int.from_bytes(spare[4 * j : 4 * j + 4], "little")
        r = j + _rnd.uniform_below(size - j, word)
        tied[j], tied[r] = tied[r], tied[j]
        out[tied[j]] = _ONE
    return _bits_from_ascii(out)
