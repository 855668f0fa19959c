"""TreeHist (Bassily, Nissim, Stemmer, Thakurta, "Practical Locally Private Heavy Hitters", NeurIPS 2017):
discovery of frequent byte strings over a prefix tree with a Hadamard response per level (issue 16).

**Values, prefixes, levels.** As :mod:`ldp_client.mechanisms.pem`: a value is 1 to ``max_length`` = L
bytes (a ``str`` as UTF-8), keyed by its length and its bits zero-padded to 8L; level j's prefix holds the
length and the first s_j = min(s_0 + j eta, 8L) bits, for the G = 1 + ceil((8L - s_0)/eta) discovery
levels. A further *verification level* G holds the whole value.

**Groups.** A device answers for one level only: its group j = HMAC-SHA256(secret, "ldp-treehist-group\\0"
|| campaign id) (first 8 bytes, big-endian) mod (G + 1). Nothing identifying leaves the device; every
device reports once per campaign (user-level epsilon = the report's epsilon). Groups 0..G-1 find the
frequent prefixes; group G only estimates the counts of the values the discovery kept: those estimates
use reports that took no part in choosing the values, so they are unbiased given the discovery (no
winner's curse), unlike estimates read from the reports that ranked the candidates.

**Report.** The level's prefix has the digest D = BLAKE2b-64(person "ldp-treehist", level (2 bytes) ||
length (1 byte) || the s_j prefix bits in ceil(s_j/8) bytes), read little-endian, cut to its low m =
``hash_bits`` bits at a discovery level (all 64 at the verification level). The device draws t =
``hadamard_bits`` uniform 64-bit rows r_1..r_t (the matrix A) and computes the answer y = A D over GF(2):
bit k is the parity of r_k AND D, the Hadamard entry H[r_k, D] = (-1)^<r_k, D> as a bit. It sends y
w.p. p = ``truth_probability``, else a uniformly random other of the g = 2**t answers. Report = (group,
rows, answer). t = 1 is Bassily et al.'s one-bit response; a larger t is local hashing with the linear
hash D -> A D, g = 2**t buckets (a better variance at larger epsilon). Given the group and the rows the
answer is g-ary randomized response: epsilon = ln(p (g - 1)/(1 - p)) exactly, whatever D.

**Rates.** p* = p. For a prefix with a digest D' != D, A D' = A D with probability exactly 2**-t over
uniform rows (A (D xor D') is uniform in {0,1}^t), so q* = p/g + (1 - 1/g)(1 - p)/(g - 1) = 1/g exactly.
Distinct prefixes whose m-bit digests coincide (probability 2**-m per pair) share their counts at that
level: a candidate can borrow the count of a colliding prefix and take a slot of the level's top_k; the
next level's digests are drawn afresh (the level is hashed in), and the verification level's 64-bit digests
make such collisions negligible (2**-64) for the final estimates.

**Server.** A discovery level's support counts come for every m-bit digest at once: 1[A D = y] =
2**-t sum_s (-1)^(s.y) (-1)^((A^T s).D) over s in {0,1}^t, so the group's reports add (-1)^(s.y) at index
A^T s (the XOR of the rows s selects, cut to m bits) of a histogram W of 2**m entries, and one
Walsh-Hadamard transform of W gives 2**t C(D) at every D (``hadamard_support_table``): O(n 2**t + m
2**m) per level, whatever the number of candidates, so steps are wide (a byte per level by default) and
levels few. The verification level tests its top_k values' 64-bit digests report by report.
``ldp_aggregator.discovery`` keeps the top_k per level and scales each group's estimate to the population.
Accumulator: the ``counts`` layout of reports per group; discovery reads the campaign's retained raw reports.

Per report on the device: one ``os.urandom`` read of 8t + 8 bytes, one BLAKE2b of at most 67 bytes and t
parities. Importing this module does not import numpy.
"""

from ldp_client.mechanisms.treehist.core import (
    TreeHistEncoder,
    TreeHistParams,
    TreeHistReport,
    direct_support,
    group_of,
    hadamard_answer,
    hadamard_support_table,
    level_digest,
)
from ldp_client.mechanisms.treehist.spec import SPEC, TreeHistSpec

__all__ = [
    "SPEC",
    "TreeHistEncoder",
    "TreeHistParams",
    "TreeHistReport",
    "TreeHistSpec",
    "direct_support",
    "group_of",
    "hadamard_answer",
    "hadamard_support_table",
    "level_digest",
]
