"""Synthetic populations of strings for discovery simulations (issue 16): generated, seeded, no network.

Each is a table value -> integer weight that :func:`simulations.populations.parse_population` turns into
an :class:`~simulations.populations.EmpiricalPopulation` (so the values are the labels and the domain is
the number of values). Labels come from a fixed seed (:data:`LABEL_SEED`): the same spec gives the same
strings on every machine; which users hold them is drawn by the simulation's own seed.

- ``url-hosts:D``: D distinct hostnames of at most 16 bytes, ``[sub.]name.tld`` (a weighted choice of
  subdomains and top-level domains, names of 2 to 3 syllables, sometimes a digit or a hyphen), with the
  long tail of web traffic: Zipf-Mandelbrot weights 1/(i + 2.7) over the ranks i = 1..D (web-page and
  host popularity follow a Zipf law of exponent near 1 with a flattened head; Breslau et al., "Web caching
  and Zipf-like distributions", INFOCOM 1999).
- ``heavy-flat:K,SHARE,D``: D random lowercase words of 3 to 6 letters; the first K hold SHARE of the
  users between them (equally), the other D - K share the rest equally: few heavy hitters over a heavy
  flat tail.
- ``zipf-words:S,D``: D random lowercase words of 3 to 6 letters with Zipf weights 1/i^S.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

import numpy as np

from ldp_client.errors import InvalidParameterError

__all__ = [
    "LABEL_SEED",
    "STRING_POPULATIONS",
    "heavy_flat",
    "string_population_counts",
    "url_hosts",
    "zipf_words",
]

LABEL_SEED: Final = 16
"""The seed of every generated label set."""
MAX_VALUES: Final = 2_000_000
# Weights are scaled to integers with this total (the empirical population's counts): relative rounding
# below 1e-6 for a weight 1e-6 of the total at D = 10**6.
_WEIGHT_TOTAL: Final = 10**15
_LETTERS: Final = np.array(list("abcdefghijklmnopqrstuvwxyz"))
_CONSONANTS: Final = np.array(list("bcdfghjklmnprstvwz"))
_VOWELS: Final = np.array(list("aeiou"))
_TLDS: Final = (
    ("com", 0.46), ("net", 0.07), ("org", 0.07), ("de", 0.05), ("io", 0.04), ("co.uk", 0.03), ("ru", 0.03),
    ("fr", 0.03), ("jp", 0.02), ("br", 0.02), ("info", 0.02), ("cn", 0.02), ("app", 0.02), ("nl", 0.02),
    ("it", 0.02), ("dev", 0.01), ("es", 0.01), ("pl", 0.01), ("tv", 0.01),
)  # fmt: skip
_SUBDOMAINS: Final = (
    ("", 0.5), ("www.", 0.25), ("m.", 0.06), ("api.", 0.05), ("cdn.", 0.05), ("mail.", 0.04), ("img.", 0.03),
    ("app.", 0.02),
)  # fmt: skip
_HOST_BYTES: Final = 16


def _choice(rng: np.random.Generator, table: Sequence[tuple[str, float]], size: int) -> list[str]:
    names = [t for t, _ in table]
    w = np.array([p for _, p in table])
    return [names[i] for i in rng.choice(len(names), size=size, p=w / w.sum())]


def _distinct(make: Callable[[np.random.Generator, int], list[str]], count: int) -> list[str]:
    """``count`` distinct strings from batches of ``make`` (seeded with :data:`LABEL_SEED`), in the order
    first made."""
    rng = np.random.default_rng(LABEL_SEED)
    out: dict[str, None] = {}
    while len(out) < count:
        for s in make(rng, max(1024, 2 * (count - len(out)))):
            out.setdefault(s, None)
            if len(out) == count:
                break
    return list(out)


def _words(rng: np.random.Generator, size: int) -> list[str]:
    lengths = rng.integers(3, 7, size=size)
    letters = rng.choice(_LETTERS, size=(size, 6))
    return ["".join(row[:n]) for row, n in zip(letters, lengths, strict=True)]


def _hosts(rng: np.random.Generator, size: int) -> list[str]:
    syllables = rng.integers(2, 4, size=size)
    cons = rng.choice(_CONSONANTS, size=(size, 3))
    vows = rng.choice(_VOWELS, size=(size, 3))
    extra = rng.random(size)
    digits = rng.integers(0, 100, size=size)
    subs, tlds = _choice(rng, _SUBDOMAINS, size), _choice(rng, _TLDS, size)
    out = []
    for i in range(size):
        name = "".join(cons[i, k] + vows[i, k] for k in range(syllables[i]))
        if extra[i] < 0.08:
            name += str(digits[i])
        elif extra[i] < 0.14:
            name = name[:3] + "-" + name[3:]
        host = f"{subs[i]}{name}.{tlds[i]}"
        if len(host) <= _HOST_BYTES:
            out.append(host)
    return out


def _counts(labels: list[str], weights: np.ndarray) -> dict[str, int]:
    scaled = np.maximum(1, np.rint(weights / weights.sum() * _WEIGHT_TOTAL)).astype(np.int64)
    return {label: int(c) for label, c in zip(labels, scaled, strict=True)}


def url_hosts(count: int) -> dict[str, int]:
    """``count`` hostnames with Zipf-Mandelbrot weights 1/(i + 2.7), i = 1..count (module docstring)."""
    ranks = np.arange(1, count + 1, dtype=np.float64)
    return _counts(_distinct(_hosts, count), 1.0 / (ranks + 2.7))


def heavy_flat(heavy: int, share: float, count: int) -> dict[str, int]:
    """``heavy`` words holding ``share`` of the users over ``count - heavy`` words sharing the rest."""
    w = np.concatenate(
        [np.full(heavy, share / heavy), np.full(count - heavy, (1.0 - share) / (count - heavy))]
    )
    return _counts(_distinct(_words, count), w)


def zipf_words(s: float, count: int) -> dict[str, int]:
    """``count`` random words with weights 1/i^s."""
    return _counts(_distinct(_words, count), np.arange(1, count + 1, dtype=np.float64) ** -s)


STRING_POPULATIONS: Final = {
    "url-hosts": "url-hosts:D (D hostnames, 1 <= D <= 2000000)",
    "heavy-flat": "heavy-flat:K,SHARE,D (K heavy words holding SHARE in (0, 1) over D - K, 1 <= K < D)",
    "zipf-words": "zipf-words:S,D (Zipf S > 0 over D random words)",
}
"""The names and their forms."""


def _count_arg(spec: str, text: str, allowed: str, low: int = 1) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidParameterError("population", spec, allowed) from None
    if not low <= value <= MAX_VALUES:
        raise InvalidParameterError("population", spec, allowed)
    return value


def _real_arg(spec: str, text: str, allowed: str, low: float, high: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidParameterError("population", spec, allowed) from None
    if not low < value < high:
        raise InvalidParameterError("population", spec, allowed)
    return value


def string_population_counts(spec: str, name: str, args: Sequence[str]) -> dict[str, int]:
    """The value -> weight table of ``name`` with ``args`` (``spec`` is the text, for messages).

    Raises:
        InvalidParameterError: the wrong number of arguments or one out of range (one line, with the form).
    """
    allowed = STRING_POPULATIONS[name]
    if name == "url-hosts" and len(args) == 1:
        return url_hosts(_count_arg(spec, args[0], allowed))
    if name == "heavy-flat" and len(args) == 3:
        heavy = _count_arg(spec, args[0], allowed)
        share = _real_arg(spec, args[1], allowed, 0.0, 1.0)
        count = _count_arg(spec, args[2], allowed, low=heavy + 1)
        return heavy_flat(heavy, share, count)
    if name == "zipf-words" and len(args) == 2:
        s = _real_arg(spec, args[0], allowed, 0.0, float("inf"))
        return zipf_words(s, _count_arg(spec, args[1], allowed))
    raise InvalidParameterError("population", spec, allowed)
