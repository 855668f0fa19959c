"""Prefix extension: parameters, keys and digests, the device's encoder, the candidates of each level and
the support counts the server computes (the method: the package docstring)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, NamedTuple, Protocol

from ldp_client import _oracle_math, privacy
from ldp_client import randomness as _rnd
from ldp_client._prob import PROB_ONE, quantize_probability, threshold_to_probability
from ldp_client.domain import check_epsilon, int_field, no_more_fields, report_quantization, take_field
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.mechanisms.olh import support_test_constants, truth_threshold

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ldp_client.secret import ClientSecret

__all__ = [
    "MAX_LEVEL_CANDIDATES",
    "PEMEncoder",
    "PEMParams",
    "PEMReport",
    "Prefix",
    "PrefixHasher",
    "PrefixTree",
    "group_of",
    "label_digests",
    "level_candidates",
    "prefix_digest",
    "prefix_of",
    "support_counts",
    "value_bytes",
]

MAX_LEVEL_CANDIDATES: Final = 1 << 16
"""The level budget: level 0 tests at most this many candidates, and top_k * 2**step_bits is at most it."""
MAX_LENGTH: Final = 64
MAX_STEP_BITS: Final = 12
MAX_ALPHABET: Final = 256
MAX_VERIFICATION_SHARE: Final = 0.5
"""At most half the users verify: the rest find the values."""
GROUP_LABEL: Final = b"ldp-pem-group\x00"
_PERSON: Final = b"ldp-pem-prefix"
_U16_LE: Final = "<u2"
_M64 = (1 << 64) - 1
_M32 = PROB_ONE - 1
_blake2b = hashlib.blake2b
_from_bytes = int.from_bytes
_uniform_below = _rnd.uniform_below


class PrefixTree(Protocol):
    """What the prefix helpers read of a discovery mechanism's parameters (pem's, treehist's)."""

    @property
    def max_length(self) -> int: ...

    def prefix_bits(self, level: int) -> int: ...


def symbol_bits(tree: object) -> int:
    """Bits per symbol of a tree's values: 8 (bytes), or ceil(log2 |A|) for pem's declared alphabet A."""
    bits: int = getattr(tree, "symbol_bits", 8)
    return bits


def tree_alphabet(tree: object) -> str:
    """A tree's declared alphabet ('' = bytes: any byte is a symbol)."""
    alphabet: str = getattr(tree, "alphabet", "")
    return alphabet


class Prefix(NamedTuple):
    """A candidate of some level: the value's length in bytes and the first bits of its padded bytes."""

    length: int
    bits: int


def check_tree_fields(
    max_length: object, start_bits: object, step_bits: object, top_k: object, sym_bits: int = 8
) -> None:
    """The prefix tree's fields (pem's, treehist's): max_length 1..64; start_bits 1..16 within the level
    budget (max_length * 2**start_bits <= 2**16) and the value's bits (sym_bits * max_length); step_bits
    1..12; top_k 1..2**16 / 2**step_bits.

    Raises:
        InvalidParameterError: the first field out of its range, by name.
    """
    length = int_field("max_length", max_length, 1, MAX_LENGTH)
    budget_bits = MAX_LEVEL_CANDIDATES.bit_length() - 1 - (length - 1).bit_length()
    int_field("start_bits", start_bits, 1, max(1, min(16, sym_bits * length, budget_bits)))
    step = int_field("step_bits", step_bits, 1, MAX_STEP_BITS)
    int_field("top_k", top_k, 1, MAX_LEVEL_CANDIDATES >> step)


def default_start_bits(max_length: object, sym_bits: int = 8) -> int:
    """8 (the first byte), less when the level budget or the length says so; over a declared alphabet
    (sym_bits < 8) the first two symbols, one when the budget allows no more."""
    length = int_field("max_length", max_length, 1, MAX_LENGTH)
    budget = MAX_LEVEL_CANDIDATES.bit_length() - 1 - (length - 1).bit_length()
    start = 8 if sym_bits == 8 else (2 * sym_bits if 2 * sym_bits <= min(16, budget) else sym_bits)
    return max(1, min(start, sym_bits * length, budget))


def tree_levels(max_length: int, start_bits: int, step_bits: int, sym_bits: int = 8) -> int:
    """G = 1 + ceil((sym_bits max_length - start_bits) / step_bits) (sym_bits 8 for bytes)."""
    return 1 + -(-(sym_bits * max_length - start_bits) // step_bits)


def make_tree_params(
    cls: Any,
    names: tuple[str, ...],
    *,
    epsilon: float | None,
    fields: dict[str, object],
    optional: tuple[tuple[str, type], ...] = (),
) -> Any:
    """``cls.from_epsilon(epsilon, **fields)``, or with no epsilon ``cls(truth_probability=..., **fields)``
    with every one of ``names`` given (``make_params``' fields of pem and treehist). The ``optional``
    fields (name, type) may be given either way and keep their defaults otherwise."""
    given = {name: take_field(fields, name, int, cls.name) for name in names if name in fields}
    given.update(
        {name: take_field(fields, name, kind, cls.name) for name, kind in optional if name in fields}
    )
    extra = tuple(name for name, _ in optional)
    if epsilon is not None:
        no_more_fields(fields, cls.name, (*names, *extra))
        return cls.from_epsilon(epsilon, **given)
    tp = take_field(fields, "truth_probability", float, cls.name) if "truth_probability" in fields else None
    no_more_fields(fields, cls.name, (*names, *extra, "truth_probability"))
    if tp is None or any(name not in given for name in names):
        raise InvalidParameterError(
            "params", sorted(given), "epsilon, or truth_probability with " + ", ".join(names)
        )
    return cls(truth_probability=tp, **given)


@dataclass(frozen=True, kw_only=True)
class PEMParams:
    """Prefix extension over values of 1 to ``max_length`` symbols (module docstring).

    Attributes:
        max_length: longest value in symbols (bytes, or characters of ``alphabet``), 1..64.
        start_bits: bits of the value in level 0's prefixes (1..16, max_length * 2**start_bits <= 2**16).
        step_bits: bits added per later level (1..12).
        top_k: candidates kept per level, 1..2**16 / 2**step_bits (the level budget).
        g: local-hashing buckets (2..2**20).
        truth_probability: P(the reported bucket is the prefix's own), in (1/g, 1), quantized to 2**-32.
        verification_share: share of the users (0..0.5, quantized to 2**-32) in the verification group,
            whose reports estimate the discovered values' counts, independently of their choice; 0: none
            (the last level's reports estimate them, biased upwards given discovery near the threshold).
        alphabet: the characters values may hold ('' = any byte, a str as UTF-8); 2..256 distinct
            characters, each a digit of ceil(log2 |A|) bits (fewer bits per symbol, so fewer levels).
        adaptive: collect the levels in rounds, each against the candidates the aggregator published
            (:mod:`ldp_client.mechanisms.pem.rounds`); False: one round.
    """

    name: ClassVar[str] = "pem"
    max_length: int
    start_bits: int
    step_bits: int
    top_k: int
    g: int
    truth_probability: float
    verification_share: float = 0.0
    alphabet: str = ""
    adaptive: bool = False
    truth_threshold: int = field(init=False, repr=False, compare=False)
    verification_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_alphabet(self.alphabet)
        check_tree_fields(self.max_length, self.start_bits, self.step_bits, self.top_k, self.symbol_bits)
        if not isinstance(self.adaptive, bool):
            raise InvalidParameterError("adaptive", self.adaptive, "a bool (rounds=adaptive or rounds=one)")
        if self.adaptive and self.verification_share:
            # Rounds estimate the discovered values from the last round's reports (its GRR or hashing
            # oracle); a verification group is not defined for them.
            raise InvalidParameterError(
                "rounds", "adaptive", "one round with verification_share (adaptive rounds take none)"
            )
        object.__setattr__(self, "truth_threshold", truth_threshold(self.g, self.truth_probability))
        v = quantize_probability("verification_share", self.verification_share, hi=MAX_VERIFICATION_SHARE)
        object.__setattr__(self, "verification_threshold", v)

    @property
    def symbol_bits(self) -> int:
        """Bits per symbol: 8 (bytes), or ceil(log2 |A|) over a declared alphabet A."""
        return (len(self.alphabet) - 1).bit_length() if self.alphabet else 8

    @property
    def p_star(self) -> float:
        return threshold_to_probability(self.truth_threshold)

    @property
    def q_star(self) -> float:
        return _oracle_math.local_hashing_q_star(self.p_star, self.g)

    @property
    def epsilon(self) -> float:
        """Of one report, and of the user: every device reports once per campaign (in one group)."""
        return privacy.grr_epsilon(self.p_star, self.g)

    @property
    def levels(self) -> int:
        """G discovery levels: 1 + ceil((symbol_bits max_length - start_bits) / step_bits)."""
        return tree_levels(self.max_length, self.start_bits, self.step_bits, self.symbol_bits)

    @property
    def verifies(self) -> bool:
        """Whether a verification group (group G) estimates the discovered values."""
        return self.verification_threshold > 0

    @property
    def groups(self) -> int:
        """G, plus the verification group G when ``verification_share`` > 0."""
        return self.levels + (1 if self.verifies else 0)

    def prefix_bits(self, level: int) -> int:
        """s_level: the value bits a prefix of ``level`` holds (all of them at G - 1 and at G)."""
        return min(self.start_bits + level * self.step_bits, self.symbol_bits * self.max_length)

    @classmethod
    def from_epsilon(
        cls,
        epsilon: float,
        *,
        max_length: int = 16,
        top_k: int = 32,
        start_bits: int | None = None,
        step_bits: int | None = None,
        g: int | None = None,
        verification_share: float = 0.0,
        alphabet: str = "",
        adaptive: bool = False,
    ) -> PEMParams:
        """PEM at ``epsilon``: local hashing with the variance-optimal g (about e^eps + 1) and p rounded
        down to a multiple of 2**-32; over bytes start_bits by default 8 (the first byte; less when the
        budget or the length says so) and step_bits 6: about n * top_k * 64 hash evaluations in all on the
        server; over a declared alphabet of b-bit symbols, start_bits 2b (two symbols, b when the budget
        says so) and step_bits b (one symbol per level)."""
        eps = check_epsilon(epsilon)
        if g is None:
            g = _oracle_math.best_olh_g(eps)
        int_field("g", g, 2, _oracle_math.MAX_LOCAL_HASH_BUCKETS)
        int_field("top_k", top_k, 1, MAX_LEVEL_CANDIDATES)
        sym = (len(check_alphabet(alphabet)) - 1).bit_length() if alphabet else 8
        if start_bits is None:
            start_bits = default_start_bits(max_length, sym)
        if step_bits is None:
            step_bits = 6 if sym == 8 else sym
        t = _oracle_math.grr_like_threshold(g, eps)
        if t == 0:
            raise InvalidParameterError("epsilon", epsilon, f"a value large enough at g={g}")
        params = cls(
            max_length=max_length,
            start_bits=start_bits,
            step_bits=step_bits,
            top_k=top_k,
            g=g,
            truth_probability=threshold_to_probability(t),
            verification_share=verification_share,
            alphabet=alphabet,
            adaptive=adaptive,
        )
        report_quantization(eps, params.epsilon)
        return params


def check_alphabet(alphabet: object) -> str:
    """'' (bytes), or 2..256 distinct characters.

    Raises:
        InvalidParameterError: not a str, one character, more than 256, or a character twice.
    """
    if not isinstance(alphabet, str):
        raise InvalidParameterError("alphabet", type(alphabet).__name__, "a str of distinct characters")
    if alphabet and not (2 <= len(alphabet) <= MAX_ALPHABET and len(set(alphabet)) == len(alphabet)):
        raise InvalidParameterError(
            "alphabet",
            alphabet[:40],
            f"'' (any byte) or 2 to {MAX_ALPHABET} distinct characters, got {len(alphabet)} characters "
            f"({len(set(alphabet))} distinct)",
        )
    return alphabet


_FIELDS: Final = ("max_length", "start_bits", "step_bits", "top_k", "g")
_OPTIONAL: Final = (("verification_share", float), ("alphabet", str))


_ROUNDS: Final = {"one": False, "adaptive": True}


def _make(*, epsilon: float | None, fields: dict[str, object]) -> PEMParams:
    """``make_params``' pem: the tree's fields and options, and ``rounds`` ("one" or "adaptive")."""
    adaptive = False
    if "rounds" in fields:
        rounds = fields.pop("rounds")
        if rounds not in _ROUNDS:
            raise InvalidParameterError("rounds", rounds, "'one' (one round, default) or 'adaptive'")
        adaptive = _ROUNDS[str(rounds)]
    params: PEMParams = make_tree_params(
        PEMParams, _FIELDS, epsilon=epsilon, fields=fields, optional=_OPTIONAL
    )
    return dataclasses.replace(params, adaptive=True) if adaptive else params


def bucket_limit(params: PEMParams) -> int:
    """Reports' buckets are below this: g, or for an adaptive campaign also any GRR round's d + 1 symbols
    (d <= 2**16; the aggregator checks each round's exact limit)."""
    return max(params.g, MAX_LEVEL_CANDIDATES + 1) if params.adaptive else params.g


# --------------------------------------------------------------------------------------------- keys


def value_bytes(params: PrefixTree, value: object) -> bytes:
    """The value's symbols, checked: 1 to max_length of them. Over bytes, the value as bytes (a str as
    UTF-8); over a declared alphabet, one byte per character holding its index in the alphabet.

    Raises:
        DomainError: not bytes or str, empty, longer than max_length symbols, or (alphabet) a character
            outside the alphabet.
    """
    alphabet = tree_alphabet(params)
    if alphabet:
        return _alphabet_digits(params.max_length, alphabet, value)
    if isinstance(value, str):
        data = value.encode("utf-8")
    elif isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
    else:
        raise DomainError("value", type(value).__name__, "a str (encoded as UTF-8) or bytes")
    if not data:
        raise DomainError("value", value, f"a non-empty value of at most {params.max_length} bytes")
    if len(data) > params.max_length:
        shown = value[:24] if isinstance(value, str | bytes) else data[:24]
        raise DomainError(
            "value", shown, f"at most {params.max_length} bytes (max_length), got {len(data)} bytes"
        )
    return data


_DIGITS: Final = "0123456789abcdef"


@functools.lru_cache(maxsize=16)
def _digit_table(alphabet: str) -> tuple[frozenset[str], dict[int, str], dict[int, str], int]:
    """The alphabet's characters; a translation to one code point per digit (its index); and one to the
    digit written in base 2**c (c = 5, 4, 3, 2 or 1 dividing b, b / c characters each) with that base, so
    that ``int(value.translate(...), base)`` packs the b-bit digits in C (the encoder's hot path)."""
    sym = (len(alphabet) - 1).bit_length()
    c = next(c for c in (5, 4, 3, 2, 1) if sym % c == 0)
    base, per = 1 << c, sym // c
    chars = (_DIGITS + "ghijklmnopqrstuv")[:base]

    def written(i: int) -> str:
        return "".join(chars[(i >> (c * (per - 1 - k))) & (base - 1)] for k in range(per))

    return (
        frozenset(alphabet),
        {ord(ch): chr(i) for i, ch in enumerate(alphabet)},
        {ord(ch): written(i) for i, ch in enumerate(alphabet)},
        base,
    )


def _alphabet_digits(max_length: int, alphabet: str, value: object) -> bytes:
    """The digits (indices in ``alphabet``) of a str of 1..max_length characters of the alphabet."""
    if isinstance(value, bytes | bytearray):
        raw = bytes(value)
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise DomainError("value", raw[:24], "UTF-8 text of the campaign's alphabet") from None
    if not isinstance(value, str):
        raise DomainError("value", type(value).__name__, f"a str of the characters {alphabet!r}")
    if not 0 < len(value) <= max_length:
        raise DomainError(
            "value",
            value[:24],
            f"1 to {max_length} characters of the alphabet (max_length), got {len(value)}",
        )
    allowed, table, _, _ = _digit_table(alphabet)
    if not allowed.issuperset(value):
        bad = next(c for c in value if c not in allowed)
        raise DomainError(
            "value", value[:24], f"characters of the campaign's alphabet {alphabet!r} only, not {bad!r}"
        )
    return value.translate(table).encode("latin-1")


def _pack(data: bytes, sym_bits: int) -> int:
    """The symbols as one big-endian integer of sym_bits bits each."""
    if sym_bits == 8:
        return _from_bytes(data, "big")
    out = 0
    for d in data:
        out = (out << sym_bits) | d
    return out


def prefix_of(params: PrefixTree, level: int, data: bytes) -> Prefix:
    """The prefix of a (checked) value's symbols (:func:`value_bytes`) at ``level``."""
    sym = symbol_bits(params)
    total = sym * params.max_length
    padded = _pack(data, sym) << (sym * (params.max_length - len(data)))
    return Prefix(len(data), padded >> (total - params.prefix_bits(level)))


def prefix_digest(level: int, s_bits: int, prefix: Prefix, person: bytes = _PERSON) -> int:
    """K: BLAKE2b-64 (person ``ldp-pem-prefix``, or treehist's) of level || length || the prefix bits
    (module docstring), read little-endian."""
    data = level.to_bytes(2, "big") + bytes((prefix.length,)) + prefix.bits.to_bytes((s_bits + 7) >> 3, "big")
    return _from_bytes(_blake2b(data, digest_size=8, person=person).digest(), "little")


class PrefixHasher:
    """:func:`prefix_digest` of a value's prefix at one level, the value checked on the way: the encoders'
    hot path (the hasher's input starts with the level and the length, fixed per level and length)."""

    __slots__ = (
        "_alphabet",
        "_base",
        "_hasher",
        "_heads",
        "_max",
        "_nbytes",
        "_shift",
        "_sym",
        "_table",
        "tree",
    )

    def __init__(self, tree: PrefixTree, level: int, person: bytes = _PERSON) -> None:
        s_bits = tree.prefix_bits(level)
        self.tree = tree
        self._sym = symbol_bits(tree)
        alphabet = tree_alphabet(tree)
        self._alphabet = _digit_table(alphabet)[0] if alphabet else None
        self._table, self._base = _digit_table(alphabet)[2:] if alphabet else ({}, 0)
        self._max = tree.max_length
        self._shift = self._sym * tree.max_length - s_bits
        self._nbytes = (s_bits + 7) >> 3
        self._hasher = _blake2b(digest_size=8, person=person)
        head = level.to_bytes(2, "big")
        self._heads = [head + bytes((n,)) for n in range(tree.max_length + 1)]

    def digest(self, value: str | bytes) -> int:
        """The digest of the value's prefix (str as UTF-8, or bytes; 1 to max_length bytes; over an
        alphabet, 1 to max_length of its characters).

        Raises:
            DomainError: empty, too long, neither str nor bytes, or outside the alphabet.
        """
        if self._alphabet is not None:
            if type(value) is str and 0 < len(value) <= self._max and self._alphabet.issuperset(value):
                length = len(value)
                bits = int(value.translate(self._table), self._base)
            else:
                data = value_bytes(self.tree, value)  # raises for what is not a valid value
                length = len(data)
                bits = _pack(data, self._sym)
        else:
            data = value.encode("utf-8") if type(value) is str else value  # type: ignore[assignment]
            if type(data) is not bytes or not 0 < len(data) <= self._max:
                data = value_bytes(self.tree, value)  # raises for what is not a valid value
            bits = _from_bytes(data, "big")
            length = len(data)
        # The prefix bits: the value padded to max_length symbols, shifted down to the level's s bits.
        move = self._sym * (self._max - length) - self._shift
        bits = bits << move if move >= 0 else bits >> -move
        h = self._hasher.copy()
        h.update(self._heads[length] + bits.to_bytes(self._nbytes, "big"))
        return _from_bytes(h.digest(), "little")


def group_of(params: PEMParams, campaign_id: str, secret: ClientSecret) -> int:
    """The device's group: with r = HMAC-SHA256(secret, GROUP_LABEL || campaign id), the verification
    group G if bytes 8..11 of r (big-endian) are below the verification threshold (2**32 times
    ``verification_share``), else the level r's first 8 bytes (big-endian) mod G (the modulo bias is below
    G/2**64). Both draws come from disjoint bytes of one PRF output: independent, and of the value too."""
    r = secret.prf(GROUP_LABEL + campaign_id.encode("utf-8"))
    if params.verifies and _from_bytes(r[8:12], "big") < params.verification_threshold:
        return params.levels
    return _from_bytes(r[:8], "big") % params.levels


class PEMReport(NamedTuple):
    """One report: the level (the device's group), the seed (a, b) and the bucket in [0, g)."""

    group: int
    a: int
    b: int
    bucket: int


def _bucket(a: int, b: int, key: int, g: int) -> int:
    return (((((a * key + b) & _M64) >> 32) * g) >> 32) & _M32


class PEMEncoder:
    """Encodes a device's values for its level (fixed by its group) with the OS CSPRNG."""

    __slots__ = ("_g", "_group", "_others", "_prefix", "_truth", "params")

    def __init__(self, params: PEMParams, *, group: int) -> None:
        if not isinstance(params, PEMParams):
            raise InvalidParameterError("params", type(params).__name__, "PEMParams")
        int_field("group", group, 0, params.groups - 1)
        self.params = params
        self._group = group
        self._g = params.g
        self._others = params.g - 1
        self._truth = params.truth_threshold
        self._prefix = PrefixHasher(params, group)

    def __repr__(self) -> str:
        return f"PEMEncoder(params={self.params!r}, group=<hidden>)"

    def encode(self, value: str | bytes) -> PEMReport:
        """Randomize one value (str as UTF-8, or bytes; 1 to max_length bytes).

        Raises:
            DomainError: empty, too long, or neither str nor bytes.
        """
        key = self._prefix.digest(value)
        r = _from_bytes(_rnd._source(24), "little")
        a = r & _M64
        b = (r >> 64) & _M64
        g = self._g
        own = (((((a * key + b) & _M64) >> 32) * g) >> 32) & _M32
        if ((r >> 128) & _M32) < self._truth:
            return PEMReport(self._group, a, b, own)
        other = _uniform_below(self._others, r >> 160)
        return PEMReport(self._group, a, b, other + 1 if other >= own else other)


# ------------------------------------------------------------------------------------------ candidates


def level_candidates(params: PrefixTree, level: int, kept: Sequence[Prefix]) -> tuple[Prefix, ...]:
    """Level 0: every (length, first s_0 bits) with zero bits beyond the length; later levels: each kept
    prefix extended by the level's new bits, those beyond its length zero. Over a declared alphabet, only
    prefixes whose symbols (whole, or the top bits of a cut one) are digits of the alphabet."""
    sym = symbol_bits(params)
    size = len(tree_alphabet(params))
    s = params.prefix_bits(level)
    out: list[Prefix] = []
    if level == 0:
        for length in range(1, params.max_length + 1):
            zero = max(0, s - sym * length)
            out.extend(Prefix(length, bits << zero) for bits in range(1 << (s - zero)))
        return _valid_digits(out, s, 0, sym, size)
    prev = params.prefix_bits(level - 1)
    width = s - prev
    for parent in kept:
        zero = min(width, max(0, s - max(sym * parent.length, prev)))
        base = parent.bits << width
        out.extend(Prefix(parent.length, base | (e << zero)) for e in range(1 << (width - zero)))
    return _valid_digits(out, s, prev, sym, size)


def _valid_digits(candidates: list[Prefix], s: int, lo: int, sym: int, size: int) -> tuple[Prefix, ...]:
    """The candidates whose symbols touching bits lo..s-1 (from the top) can be digits below ``size``:
    a whole symbol below it, a cut one whose top bits are those of some digit below it. Bytes (size 0) and
    alphabets of 2**sym characters: all of them."""
    if not size or size == 1 << sym:
        return tuple(candidates)
    out = []
    for c in candidates:
        ok = True
        for k in range(lo // sym, min(-(-s // sym), c.length)):
            hi = min(s, (k + 1) * sym)
            top = (c.bits >> (s - hi)) & ((1 << (hi - k * sym)) - 1)
            if top << ((k + 1) * sym - hi) >= size:
                ok = False
                break
        if ok:
            out.append(c)
    return tuple(out)


def label_digests(tree: PrefixTree, labels: Sequence[str], levels: int, person: bytes = _PERSON) -> Any:
    """(n_labels, levels) uint64: :func:`prefix_digest` of each label's prefix at levels 0..levels - 1
    (simulation tables). Each label is checked and packed once (over an alphabet in C, as
    :class:`PrefixHasher` does) and hashed from its packed bits at every level: about 3x faster than a
    :class:`PrefixHasher` per level, which checks and packs the value again for every digest."""
    import numpy as np

    sym = symbol_bits(tree)
    alphabet = tree_alphabet(tree)
    allowed, _, written, base_c = _digit_table(alphabet) if alphabet else (frozenset(), {}, {}, 0)
    top = tree.max_length
    packed: list[tuple[int, int]] = []
    for label in labels:
        if alphabet and type(label) is str and 0 < len(label) <= top and allowed.issuperset(label):
            n, bits = len(label), int(label.translate(written), base_c)
        else:
            data = value_bytes(tree, label)  # raises DomainError for a label the tree cannot take
            n, bits = len(data), _pack(data, sym)
        packed.append((n, bits << (sym * (top - n))))
    keys = np.empty((len(labels), levels), dtype=np.uint64)
    hasher = _blake2b(digest_size=8, person=person)
    for level in range(levels):
        s_bits = tree.prefix_bits(level)
        shift, nbytes = sym * top - s_bits, (s_bits + 7) >> 3
        heads = [level.to_bytes(2, "big") + bytes((n,)) for n in range(top + 1)]
        column = []
        for n, bits in packed:
            h = hasher.copy()
            h.update(heads[n] + (bits >> shift).to_bytes(nbytes, "big"))
            column.append(_from_bytes(h.digest(), "little"))
        keys[:, level] = column
    return keys


@functools.lru_cache(maxsize=8)
def _label_keys(params: PEMParams, labels: tuple[str, ...]) -> Any:
    """(n_labels, groups) uint64 digests of each label's prefix at each level, and of the whole label at
    the verification level (simulation)."""
    return label_digests(params, labels, params.groups)


# Reports x candidates per block of the support evaluation: 512 KiB of uint64 temporaries stay in cache
# (measured about 1.6x faster than 8 MiB blocks).
_BLOCK = 1 << 16


def support_counts(
    a: NDArray[np.uint64], b: NDArray[np.uint64], buckets: NDArray[Any], keys: NDArray[np.uint64], g: int
) -> NDArray[np.int64]:
    """C_K for each digest K: the reports (a, b, y) that hash K into y (numpy, blocked)."""
    import numpy as np

    counts = np.zeros(keys.shape[0], dtype=np.int64)
    n = int(a.shape[0])
    if n == 0 or keys.shape[0] == 0:
        return counts
    b_prime, limit = support_test_constants(b, buckets, g)
    a64 = np.asarray(a, dtype=np.uint64)
    rows = max(1, _BLOCK // keys.shape[0])
    work = np.empty((min(rows, n), keys.shape[0]), dtype=np.uint64)
    hits = np.empty(work.shape, dtype=np.bool_)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        t, m = work[: stop - start], hits[: stop - start]
        np.multiply(a64[start:stop, None], keys[None, :], out=t)
        np.add(t, b_prime[start:stop, None], out=t)
        np.less(t, limit[start:stop, None], out=m)
        # Summing the booleans as bytes into int32 per block (at most _BLOCK rows) is faster than
        # count_nonzero along axis 0.
        counts += np.add.reduce(m.view(np.uint8), axis=0, dtype=np.int32)
    return counts
