"""RAPPOR's per-report encoders: string RAPPOR (Bloom filter + cohorts), basic (one-hot), boolean (one bit).

Erlingsson, Pihur, Korolova, "RAPPOR: Randomized Aggregatable Privacy-Preserving Ordinal Response",
CCS 2014. A value is encoded as a k-bit vector B (a Bloom filter with h hashes that depend on the client's
cohort; a one-hot vector; or the bit itself). Then:

* **PRR** (permanent randomized response, memoized per value): B'_i = 1 w.p. f/2, 0 w.p. f/2, else B_i.
  It is derived deterministically from HMAC-SHA256(client secret, campaign, value), so it needs no storage,
  survives restarts and is the same every time the value is reported (the longitudinal bound eps_inf).
* **IRR** (instantaneous randomized response, fresh per report): S_i = 1 w.p. q if B'_i = 1, w.p. p if 0.

Every byte that feeds the Bloom hashes and the PRR derivation is fixed by the written spec
``docs/rappor-encoding.md`` (version v1) and pinned by golden vectors in the tests: a PRR that changed
between releases would let an observer average a user's old and new reports.

Per-report encoders use only the OS CSPRNG (one ``os.urandom`` call per report) and the client secret;
importing this module does not import numpy. The batch encoders for simulation are in
:mod:`ldp_client.mechanisms.rappor.batch`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import mmh3

from ldp_client._prob import PROB_ONE, BitVectorSampler, expansion_ops
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.mechanisms.rappor.params import (
    MAX_COHORTS,
    MAX_RAPPOR_BITS,
    MAX_RAPPOR_HASHES,
    BasicRapporParams,
    BooleanRapporParams,
    RapporParams,
)
from ldp_client.secret import ClientSecret

__all__ = [
    "BASIC_PRR_LABEL",
    "BOOLEAN_PRR_LABEL",
    "PRR_LABEL",
    "SPEC_VERSION",
    "BasicRapporEncoder",
    "BooleanRapporEncoder",
    "RapporEncoder",
    "RapporReport",
    "bloom_bits",
    "bloom_input",
    "bloom_positions",
    "cohort_of",
    "permanent_response",
]

SPEC_VERSION: Final = "v1"
# DRBG labels (spec v1, section 5). Each is followed by a 0x00 byte in the HMAC message; none contains
# 0x00, so the three message families are disjoint.
PRR_LABEL: Final = b"ldp-client/rappor/prr/v1"
BASIC_PRR_LABEL: Final = b"ldp-client/basic-rappor/prr/v1"
BOOLEAN_PRR_LABEL: Final = b"ldp-client/boolean-rappor/prr/v1"

_HMAC_BLOCK = 32
_U32_LIMIT = 1 << 32
# Memo bound in entries, and a cap on the memo's bit volume so a huge one-hot domain cannot exhaust memory.
DEFAULT_MEMO_SIZE: Final = 4096
_MEMO_MAX_BITS = 1 << 27


# --------------------------------------------------------------------------------------------- reports


@dataclass(frozen=True, slots=True)
class RapporReport:
    """One string-RAPPOR report: the client's cohort and the k report bits (bit i of ``bits`` = bit i)."""

    cohort: int
    bits: int

    def to_bytes(self, k: int) -> bytes:
        """Packed report: ceil(k/8) bytes, bit i at ``(byte[i // 8] >> (i % 8)) & 1`` (little bit order)."""
        _check_k(k, MAX_RAPPOR_BITS)
        if not 0 <= self.bits < (1 << k):
            raise InvalidReportError("bits", self.bits, f"an integer in [0, 2**{k})")
        return self.bits.to_bytes((k + 7) // 8, "little")

    @classmethod
    def from_bytes(cls, data: bytes, *, k: int, cohort: int) -> RapporReport:
        """Inverse of :meth:`to_bytes`; rejects a wrong length or nonzero padding bits."""
        _check_k(k, MAX_RAPPOR_BITS)
        if len(data) != (k + 7) // 8:
            raise InvalidReportError("bits", f"<{len(data)} bytes>", f"exactly {(k + 7) // 8} bytes (k={k})")
        bits = int.from_bytes(data, "little")
        if bits >> k:
            raise InvalidReportError("bits", data.hex(), f"padding bits above bit {k - 1} equal to 0")
        if isinstance(cohort, bool) or not isinstance(cohort, int) or not 0 <= cohort < MAX_COHORTS:
            raise InvalidReportError("cohort", cohort, f"an integer in [0, {MAX_COHORTS})")
        return cls(cohort=cohort, bits=bits)


# ------------------------------------------------------------------------------------ spec primitives


def _check_k(k: int, hi: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= hi:
        raise InvalidParameterError("k", k, f"an integer in [1, {hi}]")


def _u32(x: int) -> bytes:
    return x.to_bytes(4, "big")


def _lp(field_name: str, data: bytes) -> bytes:
    """Length-prefixed field: 4-byte big-endian length, then the bytes."""
    if len(data) >= _U32_LIMIT:
        raise DomainError(field_name, f"<{len(data)} bytes>", f"at most {_U32_LIMIT - 1} UTF-8 bytes")
    return len(data).to_bytes(4, "big") + data


def _utf8(field_name: str, value: object, error: type[DomainError | InvalidParameterError]) -> bytes:
    """UTF-8 bytes of a str; anything else (or an unpaired surrogate) raises ``error`` naming the field."""
    if not isinstance(value, str):
        raise error(field_name, value, "a str")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise error(field_name, value, f"a str encodable as UTF-8 ({exc.reason})") from exc


def _campaign_bytes(campaign_id: object) -> bytes:
    return _utf8("campaign_id", campaign_id, InvalidParameterError)


def _check_cohort(cohort: object, m: int = MAX_COHORTS) -> int:
    if isinstance(cohort, bool) or not isinstance(cohort, int) or not 0 <= cohort < m:
        raise InvalidParameterError("cohort", cohort, f"an integer in [0, {m})")
    return cohort


def _check_h(h: object) -> int:
    if isinstance(h, bool) or not isinstance(h, int) or not 1 <= h <= MAX_RAPPOR_HASHES:
        raise InvalidParameterError("h", h, f"an integer in [1, {MAX_RAPPOR_HASHES}]")
    return h


def bloom_input(campaign_id: str, cohort: int, value: str) -> bytes:
    """The exact bytes hashed into the Bloom filter (spec v1, section 2).

    ``u32be(len(c)) || c || u32be(cohort) || u32be(len(v)) || v`` with c, v the UTF-8 bytes of the campaign
    id and the value. The length prefixes make the map injective: no two (campaign, cohort, value) give the
    same bytes.
    """
    c = _campaign_bytes(campaign_id)
    _check_cohort(cohort)
    v = _utf8("value", value, DomainError)
    return _lp("campaign_id", c) + _u32(cohort) + _lp("value", v)


def _positions(msg: bytes, k: int, h: int) -> tuple[int, ...]:
    hash32 = mmh3.hash
    return tuple(hash32(msg, i, False) % k for i in range(h))


def _bloom_from_msg(msg: bytes, k: int, h: int) -> int:
    hash32 = mmh3.hash
    bits = 0
    for i in range(h):
        bits |= 1 << (hash32(msg, i, False) % k)
    return bits


def bloom_positions(campaign_id: str, cohort: int, value: str, k: int, h: int) -> tuple[int, ...]:
    """The h Bloom positions of ``value`` for a client in ``cohort`` (spec v1, section 2).

    Position i (0 <= i < h) is ``mmh3.hash(bloom_input(...), seed=i, signed=False) % k`` (MurmurHash3
    x86_32). Duplicates are kept: the filter then has fewer than h bits set. Hashing depends on the cohort,
    so a collision in one cohort is unlikely in another (CCS 2014, §3.1).
    """
    _check_k(k, MAX_RAPPOR_BITS)
    _check_h(h)
    return _positions(bloom_input(campaign_id, cohort, value), k, h)


def bloom_bits(campaign_id: str, cohort: int, value: str, k: int, h: int) -> int:
    """The Bloom filter as an int: bit j is set iff j is one of :func:`bloom_positions`."""
    bits = 0
    for j in bloom_positions(campaign_id, cohort, value, k, h):
        bits |= 1 << j
    return bits


def _as_secret(secret: object) -> ClientSecret:
    if isinstance(secret, ClientSecret):
        return secret
    if isinstance(secret, bytes | bytearray):
        return ClientSecret.from_bytes(bytes(secret))
    raise InvalidParameterError("secret", type(secret).__name__, "a ClientSecret or 32 bytes")


def cohort_of(secret: bytes, m: int) -> int:
    """Cohort of the client with this 32-byte secret: first 8 bytes of HMAC-SHA256(secret,
    b"ldp-client/rappor/cohort/v1"), big-endian, mod m (spec v1, section 4)."""
    return _as_secret(secret).cohort(m)


def _drbg(prf: Callable[[bytes], bytes], seed: bytes, nbytes: int) -> bytes:
    """First ``nbytes`` of the stream block_0 || block_1 || ..., block_j = PRF(seed || u32be(j))."""
    blocks = (nbytes + _HMAC_BLOCK - 1) // _HMAC_BLOCK
    if blocks == 1:
        return prf(seed + b"\x00\x00\x00\x00")
    return b"".join([prf(seed + _u32(j)) for j in range(blocks)])


class _PrrDeriver:
    """PRR = (R & V) | (~R & B) from the HMAC-SHA256 counter-mode DRBG (spec v1, section 5).

    R (bits Bernoulli(F/2**32)) is :class:`BitVectorSampler` (F, k) over the first stream bytes, V (fair
    coins) the next ceil(k/8) bytes, little-endian, masked to k bits. So each PRR bit is 1 w.p. F/2**33,
    0 w.p. F/2**33, else the Bloom bit (f/2 each; CCS 2014, §3 step 2).
    """

    __slots__ = ("_k_suffix", "_mask", "_nbytes", "_ops", "_prefix", "_prf", "_sampler", "_shift", "_v_bytes")

    def __init__(
        self, prf: Callable[[bytes], bytes], label: bytes, campaign: bytes, k: int, f_t: int
    ) -> None:
        self._prf = prf
        self._prefix = label + b"\x00" + _lp("campaign_id", campaign)
        self._k_suffix = _u32(k)
        self._sampler = BitVectorSampler(f_t, k) if f_t else None
        self._ops = expansion_ops(f_t)
        self._v_bytes = (k + 7) // 8
        self._shift = 8 * self._v_bytes
        self._mask = (1 << k) - 1
        self._nbytes = (self._sampler.nbytes if self._sampler else 0) + self._v_bytes

    def __call__(self, value_bytes: bytes, bloom: int) -> int:
        sampler = self._sampler
        if sampler is None:
            # f = 0: R = 0, so PRR = B whatever the stream; skip the HMAC.
            return bloom
        seed = self._prefix + _lp("value", value_bytes) + self._k_suffix
        if self._nbytes <= _HMAC_BLOCK:
            stream = self._prf(seed + b"\x00\x00\x00\x00")
        else:
            stream = _drbg(self._prf, seed, self._nbytes)
        if self._shift <= 512:
            # Short words (k <= 512): cut them from one int; same bits as BitVectorSampler.sample.
            x = int.from_bytes(stream, "little")
            shift = self._shift
            r = 0
            for is_or in self._ops:
                r = (x | r) if is_or else (x & r)
                x >>= shift
            mask = self._mask
            r &= mask
            v = x & mask
        else:
            r = sampler.sample(stream, 0)
            start = sampler.nbytes
            v = int.from_bytes(stream[start : start + self._v_bytes], "little") & self._mask
        return (r & v) | (~r & bloom)


def permanent_response(
    secret: ClientSecret | bytes, params: RapporParams, *, campaign_id: str, value: str
) -> int:
    """The string-RAPPOR PRR of ``value`` for the client with ``secret`` (spec v1, section 5).

    Deterministic: the same (secret, campaign, value, k, f) always gives the same bits.
    """
    if not isinstance(params, RapporParams):
        raise InvalidParameterError("params", type(params).__name__, "a RapporParams")
    s = _as_secret(secret)
    c = _campaign_bytes(campaign_id)
    v = _utf8("value", value, DomainError)
    msg = _lp("campaign_id", c) + _u32(s.cohort(params.m)) + _lp("value", v)
    bloom = _bloom_from_msg(msg, params.k, params.h)
    return _PrrDeriver(s.prf, PRR_LABEL, c, params.k, params.f_threshold)(v, bloom)


# ------------------------------------------------------------------------------------- IRR (per report)


def _make_irr(p_t: int, q_t: int, k: int) -> Callable[[int], int]:
    """S = (PRR & Bq) | (~PRR & Bp), Bq/Bp bit vectors Bernoulli(q)/Bernoulli(p) from ONE os.urandom call.

    Bq is :class:`BitVectorSampler` (q, k) over the first bytes of the buffer and Bp the same for p over
    the rest (spec v1, section 6). The returned closure has everything precomputed; for k <= 512 it cuts the
    words from one big int (cheaper than slicing bytes), with a dedicated path for the default
    (p, q) = (1/2, 3/4).
    """
    wb = (k + 7) // 8
    shift = 8 * wb
    mask = (1 << k) - 1
    ops_q = expansion_ops(q_t)
    ops_p = expansion_ops(p_t)
    nbytes = wb * (len(ops_q) + len(ops_p))
    const_q = mask if q_t == PROB_ONE else 0
    const_p = mask if p_t == PROB_ONE else 0
    urandom = os.urandom
    from_bytes = int.from_bytes

    if ops_q == (True, True) and ops_p == (True,):
        # The default (p, q) = (1/2, 3/4): Bq = x1 | x2, Bp = x3.
        def irr_default(prr: int) -> int:
            x = from_bytes(urandom(nbytes), "little")
            bq = (x | (x >> shift)) & mask
            bp = (x >> (shift + shift)) & mask
            return (prr & bq) | (~prr & bp)

        return irr_default

    if k <= 512:
        # Short words: cut them from one big int (cheaper than slicing bytes).
        def irr_small(prr: int) -> int:
            x = from_bytes(urandom(nbytes), "little") if nbytes else 0
            bq = const_q
            if ops_q:
                bq = 0
                for is_or in ops_q:
                    bq = (x | bq) if is_or else (x & bq)
                    x >>= shift
                bq &= mask
            bp = const_p
            if ops_p:
                bp = 0
                for is_or in ops_p:
                    bp = (x | bp) if is_or else (x & bp)
                    x >>= shift
                bp &= mask
            return (prr & bq) | (~prr & bp)

        return irr_small

    # Long words: shifting a many-kilobyte int once per word would be quadratic, so slice the buffer.
    sampler_q = BitVectorSampler(q_t, k)
    sampler_p = BitVectorSampler(p_t, k)
    offset_p = sampler_q.nbytes

    def irr(prr: int) -> int:
        buf = urandom(nbytes)
        bq = sampler_q.sample(buf, 0)
        bp = sampler_p.sample(buf, offset_p)
        return (prr & bq) | (~prr & bp)

    return irr


def _check_memo_size(memo_size: object, k: int) -> int:
    if isinstance(memo_size, bool) or not isinstance(memo_size, int) or memo_size < 1:
        raise InvalidParameterError("memo_size", memo_size, "an integer >= 1")
    return max(1, min(memo_size, _MEMO_MAX_BITS // k))


class _Encoder:
    """Shared state of the three RAPPOR encoders: secret PRF, PRR deriver, IRR sampler, bounded LRU memo."""

    __slots__ = ("_deriver", "_irr", "_memo", "campaign_id", "params")

    def __init__(
        self,
        params: Any,
        *,
        label: bytes,
        k: int,
        campaign_id: str,
        secret: ClientSecret | bytes,
        memo_size: int,
    ) -> None:
        c = _campaign_bytes(campaign_id)
        s = _as_secret(secret)
        self.params = params
        self.campaign_id = campaign_id
        self._deriver = _PrrDeriver(s.prf, label, c, k, params.f_threshold)
        self._irr = _make_irr(params.p_threshold, params.q_threshold, k)
        # The PRR is a deterministic function of (secret, campaign, value): the memo is only a speed-up,
        # so a bounded LRU (C implementation, thread-safe) loses nothing when it evicts.
        self._memo = functools.lru_cache(maxsize=_check_memo_size(memo_size, k))(self._compute_prr)

    def _compute_prr(self, value: Any) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def memo_info(self) -> functools._CacheInfo:
        """Hits, misses, maxsize and current size of the PRR memo."""
        return self._memo.cache_info()


class RapporEncoder(_Encoder):
    """String RAPPOR on the device: ``encode(value) -> RapporReport`` (CCS 2014, §3).

    The cohort is derived from the secret; the Bloom filter and PRR of a value are memoized in a bounded
    LRU; each report draws a fresh IRR from ``os.urandom``.

    Args:
        params: The campaign's RAPPOR parameters.
        campaign_id: The campaign id (part of the hashed and HMAC-ed bytes).
        secret: The client secret (:meth:`ClientSecret.load_or_create`), or its 32 bytes in tests.
        memo_size: Maximum number of memoized values.
    """

    __slots__ = ("_bloom_prefix", "_h", "_k", "cohort")

    def __init__(
        self,
        params: RapporParams,
        *,
        campaign_id: str,
        secret: ClientSecret | bytes,
        memo_size: int = DEFAULT_MEMO_SIZE,
    ) -> None:
        if not isinstance(params, RapporParams):
            raise InvalidParameterError("params", type(params).__name__, "a RapporParams")
        s = _as_secret(secret)
        super().__init__(
            params, label=PRR_LABEL, k=params.k, campaign_id=campaign_id, secret=s, memo_size=memo_size
        )
        self.cohort: int = s.cohort(params.m)
        self._k = params.k
        self._h = params.h
        self._bloom_prefix = _lp("campaign_id", _campaign_bytes(campaign_id)) + _u32(self.cohort)

    def _compute_prr(self, value: str) -> int:
        v = _utf8("value", value, DomainError)
        bloom = _bloom_from_msg(self._bloom_prefix + _lp("value", v), self._k, self._h)
        return self._deriver(v, bloom)

    def permanent_response(self, value: str) -> int:
        """The memoized PRR of ``value`` (bit i = PRR bit i)."""
        if type(value) is not str:
            value = _exact_str(value)
        return self._memo(value)

    def encode(self, value: str) -> RapporReport:
        """One report of ``value``: the memoized PRR, then a fresh IRR. Raises DomainError for a non-str
        or a string that is not valid UTF-8 (unpaired surrogates)."""
        if type(value) is not str:
            value = _exact_str(value)
        return RapporReport(cohort=self.cohort, bits=self._irr(self._memo(value)))


def _exact_str(value: object) -> str:
    # A str subclass is reduced to a plain str so its own __hash__/__eq__ cannot confuse the memo.
    if isinstance(value, str):
        return str.__str__(value)
    raise DomainError("value", value, "a str")


class BasicRapporEncoder(_Encoder):
    """Basic RAPPOR: one-hot over the declared domain (bit i set iff the value has index i), PRR, IRR.

    ``encode(value) -> int`` returns the k = d report bits (bit i of the int = bit i). The PRR is
    memoized per domain index (spec v1, section 7).
    """

    __slots__ = ()

    def __init__(
        self,
        params: BasicRapporParams,
        *,
        campaign_id: str,
        secret: ClientSecret | bytes,
        memo_size: int = DEFAULT_MEMO_SIZE,
    ) -> None:
        if not isinstance(params, BasicRapporParams):
            raise InvalidParameterError("params", type(params).__name__, "a BasicRapporParams")
        super().__init__(
            params,
            label=BASIC_PRR_LABEL,
            k=params.k,
            campaign_id=campaign_id,
            secret=secret,
            memo_size=memo_size,
        )

    def _compute_prr(self, index: int) -> int:
        return self._deriver(_u32(index), 1 << index)

    def permanent_response(self, value: str | int) -> int:
        """The memoized PRR of ``value``."""
        return self._memo(self.params.domain.index(value))

    def encode(self, value: str | int) -> int:
        """One report of ``value`` (a label or index of the domain; DomainError otherwise)."""
        return self._irr(self._memo(self.params.domain.index(value)))


class BooleanRapporEncoder(_Encoder):
    """Boolean RAPPOR (k = 1): the bit is the value, then PRR and IRR (spec v1, section 7).

    Both PRRs are derived at construction, so ``encode`` costs one 1-to-3-byte ``os.urandom`` call.
    """

    __slots__ = ("_prr_false", "_prr_true")

    def __init__(
        self,
        params: BooleanRapporParams,
        *,
        campaign_id: str,
        secret: ClientSecret | bytes,
        memo_size: int = 2,
    ) -> None:
        if not isinstance(params, BooleanRapporParams):
            raise InvalidParameterError("params", type(params).__name__, "a BooleanRapporParams")
        super().__init__(
            params, label=BOOLEAN_PRR_LABEL, k=1, campaign_id=campaign_id, secret=secret, memo_size=memo_size
        )
        self._prr_false = self._compute_prr(False)
        self._prr_true = self._compute_prr(True)

    def _compute_prr(self, value: bool) -> int:
        return self._deriver(b"\x01" if value else b"\x00", int(value))

    def permanent_response(self, value: bool) -> int:
        """The PRR bit of ``value``."""
        return self._prr_true if _check_bool(value) else self._prr_false

    def encode(self, value: bool) -> int:
        """One report bit (0 or 1) of ``value`` (a bool; anything else raises DomainError)."""
        return self._irr(self._prr_true if _check_bool(value) else self._prr_false)


def _check_bool(value: object) -> bool:
    if value is True or value is False:
        return value
    raise DomainError("value", value, "a bool (True or False)")


# ------------------------------------------------------------------- memo identities (the device ledger)
# The bytes each encoder derives its PRR from, so that the device ledger charges epsilon_inf once per PRR.


def string_memo_identity(value: object) -> bytes:
    """String RAPPOR: the value's UTF-8 bytes (the ``value`` field of the PRR seed); DomainError otherwise."""
    return _utf8("value", value if type(value) is str else _exact_str(value), DomainError)


def basic_memo_identity(params: BasicRapporParams, value: object) -> bytes:
    """Basic RAPPOR: the value's domain index as u32 (the PRR seed's value field); DomainError otherwise."""
    return _u32(params.domain.index(value))


def boolean_memo_identity(value: object) -> bytes:
    """Boolean RAPPOR: one byte, the bit (the PRR seed's value field); DomainError for a non-bool."""
    return b"\x01" if _check_bool(value) else b"\x00"
