"""Prefix extension (PEM; Wang, Li, Jha, "Locally Differentially Private Heavy Hitter Identification",
arXiv:1708.06674): discovery of frequent byte strings nobody listed in advance (issue 16).

**Values and keys.** A value is a byte string of 1 to ``max_length`` = L bytes (a ``str`` is encoded as
UTF-8 first); any byte is allowed (or, with an ``alphabet``, characters of it: below). Its *key* is its
length ell (1..L) followed by the 8L bits of the value padded with zero bytes to L: the length makes the
padding unambiguous (b"a" and b"a\\x00" differ), and the server never extends a prefix of length ell with
non-zero bits beyond bit 8 ell, so short values cost no candidates once complete. The 8L bits are cut into
segments: ``start_bits`` s_0, then ``step_bits`` eta each (the last one shorter when eta does not divide),
giving levels j = 0..G-1 with G = 1 + ceil((8L - s_0)/eta); level j's prefix holds the length and the first
s_j = min(s_0 + j eta, 8L) bits.

**A declared alphabet** (``alphabet`` A, optional). Values are then strings of 1 to L characters of A,
each character the digit of its index in A, written in b = ceil(log2 |A|) bits (26 letters: 5 bits), and
the key is the length followed by the L b-bit digits, zero digits beyond the length; everything above holds
with 8 replaced by b (G = 1 + ceil((b L - s_0)/eta)), and the server extends a prefix only with bits that
can start a digit below |A|, so a level tests at most top_k |A|^(eta/b) candidates: the candidates of the
base-|A| tree, in b-bit words. Fewer bits per character means fewer levels for the same strings (6-letter
words: 30 bits, 5 levels of one letter each from a 2-letter start, against 48 bits and 8 levels over
bytes), so each group holds more of the users: the variance of a level's estimates falls as G does (Wang
et al. choose the segments so). A value with a character outside A is refused on the device
(``DomainError`` naming the character). ``from_epsilon`` with an alphabet: start_bits 2b, step_bits b.

**Groups.** A device reports for one group only: with r = HMAC-SHA256(secret, "ldp-pem-group\\0" ||
campaign id), the verification group G if bytes 8..11 of r (big-endian) are below 2**32 v
(v = ``verification_share``, 0 by default: no such group), else the level (first 8 bytes of r, big-endian)
mod G. Nothing identifying leaves the device, the group is independent of the value, and every device
reports once per campaign (user-level epsilon = the report's epsilon).

**Verification group** (v > 0). Its devices report the whole value's key at level G (s_G = all the bits),
in the same report shape (group G). The server estimates the values the last discovery level kept from
these reports only: they took no part in choosing them, so given the discovery the estimates are unbiased
and their intervals keep their coverage (Bassily et al.'s TreeHist and Apple's SFP estimate the same way;
:mod:`ldp_client.mechanisms.treehist`). Without it, the last level's reports both rank and estimate, and a
value near the threshold is over-estimated when it is found (winner's curse). The price: the G levels hold
(1 - v) N users between them, and the counts come from v N users (not pooled across levels).

**Report.** The prefix's 64-bit digest K = BLAKE2b-64(person "ldp-pem-prefix", data = level (2 bytes, big
endian) || ell (1 byte) || the s_j prefix bits, big-endian, in ceil(s_j/8) bytes) is hashed with local
hashing as :mod:`ldp_client.mechanisms.olh` does: a fresh seed (a, b) of two uniform 64-bit words, bucket
floor((((a K + b) mod 2**64) >> 32) g / 2**32), reported w.p. p = ``truth_probability`` else a uniformly
random other bucket. Report = (group, a, b, bucket). Given the group and the seed, P(bucket | value) is p or
(1-p)/(g-1), so epsilon = ln(p (g-1)/(1-p)) exactly as OLH's, whatever the digest. The digest only
matters for utility: two distinct prefixes share a digest with probability about 2**-64 per pair, and the
multiply-add-shift of two distinct 64-bit digests collides in bucket with probability 1/g up to terms in
2**(t-32) g, t the 2-adic valuation of their difference (about 2**-20 for g = 2**12 and a random pair):
the estimator uses OLH's q*, and a seeded test checks the collision rate of distinct prefixes.

**Server.** Level j's candidates (and at level G the values level G - 1 kept) are tested against the
reports of group j only (``discovery_support``:
report (a, b, y) supports candidate K iff (a K + b') mod 2**64 < W, :func:`olh.support_test_constants`,
in blocks of numpy uint64 arithmetic); ``ldp_aggregator.discovery`` keeps the top_k of each level and
scales group estimates to the population. The accumulator is the ``counts`` layout of reports per level;
discovery reads the campaign's retained raw reports (the candidates of level j are known only after level
j-1), as paired campaigns with a string-RAPPOR side do.

Per report: one 24-byte ``os.urandom`` read and one BLAKE2b of at most 67 bytes. Batch (seeded numpy
Generator, simulation only): the verification group w.p. v (a uniform 32-bit word below 2**32 v), else a
level uniform in [0, G); the digests of the population's labels computed once.
Importing this module does not import numpy.
"""

from ldp_client.mechanisms.pem.core import (
    MAX_LEVEL_CANDIDATES,
    PEMEncoder,
    PEMParams,
    PEMReport,
    Prefix,
    group_of,
    level_candidates,
    prefix_digest,
    prefix_of,
    support_counts,
    value_bytes,
)
from ldp_client.mechanisms.pem.spec import SPEC, PEMSpec

__all__ = [
    "MAX_LEVEL_CANDIDATES",
    "SPEC",
    "PEMEncoder",
    "PEMParams",
    "PEMReport",
    "PEMSpec",
    "Prefix",
    "group_of",
    "level_candidates",
    "prefix_digest",
    "prefix_of",
    "support_counts",
    "value_bytes",
]
