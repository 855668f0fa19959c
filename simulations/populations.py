"""Simulated user populations: categorical (frequency estimation) and numeric (mean estimation).

Everything here is for simulation only: sampling takes an explicit, seeded ``numpy.random.Generator``.

Spec grammar accepted by :func:`parse_population` (surrounding whitespace ignored, names lower case)::

    zipf:S                    Zipf over ranks 1..D: P(rank r) ∝ r^-S, S > 0; value r-1 has rank r
    uniform                   uniform over the D values 0..D-1
    geometric:P               P(i) ∝ (1-P)^i P over i = 0..D-1, 0 < P < 1 (truncated to the domain and
                              renormalised: P(i) = (1-P)^i P / (1 - (1-P)^D))
    empirical:PATH            the distribution of a CSV file of ``value,count`` lines (PATH is everything
                              after the first colon, so it may contain ':' or ',')
    normal:MU,SIGMA[,LO,HI]   normal(MU, SIGMA^2) *truncated* to [LO, HI] (default [-1, 1]), SIGMA > 0
    uniform-num:LO,HI         continuous uniform on [LO, HI], LO < HI
    dirichlet:ALPHA,SEED      a seeded random joint over the D values: weights Dirichlet(ALPHA, ..., ALPHA)
                              drawn from SeedSequence([SEED, D]) (ALPHA > 0; small ALPHA: a few heavy
                              values). As the records of several attributes (the D values their full
                              joint, row-major; calm), a known joint whose attributes are dependent

The first four are categorical (:class:`CategoricalPopulation`: a distribution over the values 0..D-1 of
a domain of size D); the last two are numeric (:class:`NumericPopulation`: real values in [LO, HI]).

Why truncation (rejection) rather than clipping for the normal: clipping piles the mass outside
[LO, HI] onto the two end points, so the population would have atoms at the bounds that no one asked for;
truncation keeps a continuous density of the requested shape, and its mean and variance have closed
forms (Johnson, Kotz, Balakrishnan, *Continuous Univariate Distributions* vol. 1, §13.10). A mechanism
that needs values in a range still clips on its own; that is the mechanism's business, not the
population's.
"""

from __future__ import annotations

import csv
import io
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
from numpy.typing import NDArray

from ldp_client._exact_sampling import check_rng as _check_rng
from ldp_client.errors import InvalidParameterError
from ldp_client.params import MAX_DOMAIN_SIZE
from simulations.string_populations import STRING_POPULATIONS, string_population_counts

__all__ = [
    "ALLOWED_POPULATIONS",
    "DEFAULT_CHUNK_SIZE",
    "CategoricalPopulation",
    "DirichletPopulation",
    "EmpiricalPopulation",
    "GeometricPopulation",
    "NumericPopulation",
    "Population",
    "TruncatedNormalPopulation",
    "UniformNumericPopulation",
    "UniformPopulation",
    "ZipfPopulation",
    "load_empirical_csv",
    "parse_categorical_population",
    "parse_numeric_population",
    "parse_population",
]

ALLOWED_POPULATIONS = (
    "zipf:S (S > 0), uniform, geometric:P (0 < P < 1), empirical:PATH (CSV of value,count lines), "
    "url-hosts:D, heavy-flat:K,SHARE,D, zipf-words:S,D (strings: simulations.string_populations), "
    "normal:MU,SIGMA[,LO,HI] (SIGMA > 0, LO < HI, default -1,1), uniform-num:LO,HI (LO < HI), "
    "dirichlet:ALPHA,SEED (ALPHA > 0, SEED an integer >= 0)"
)
_CATEGORICAL_ALLOWED = (
    "zipf:S (S > 0), uniform, geometric:P (0 < P < 1), empirical:PATH, dirichlet:ALPHA,SEED"
)
_NUMERIC_ALLOWED = "normal:MU,SIGMA[,LO,HI] (SIGMA > 0, LO < HI, default -1,1), uniform-num:LO,HI (LO < HI)"

# Users per chunk when values are drawn one per user: bounds temporary memory (8 bytes per user per array).
DEFAULT_CHUNK_SIZE = 1 << 22
# Truncated-normal rejection sampling draws 1/Z normals per accepted value; below this mass in [lo, hi]
# that is too wasteful (and the parameters are almost surely a mistake), so it is refused.
_MIN_TRUNCATED_MASS = 0.01
_COUNT_RE = re.compile(r"[0-9]+")


# --------------------------------------------------------------------------------------------------------
# Shared validation (also used by simulations.sampling)


def _check_n_users(n_users: object) -> int:
    if isinstance(n_users, bool) or not isinstance(n_users, int | np.integer):
        raise InvalidParameterError("n_users", n_users, "an integer >= 1")
    n = int(n_users)
    if n < 1:
        raise InvalidParameterError("n_users", n_users, "an integer >= 1")
    return n


def _check_domain_size(domain_size: object, minimum: int = 1) -> int:
    if isinstance(domain_size, bool) or not isinstance(domain_size, int | np.integer):
        raise InvalidParameterError(
            "domain_size", domain_size, f"an integer in [{minimum}, {MAX_DOMAIN_SIZE}]"
        )
    d = int(domain_size)
    if not 1 <= d <= MAX_DOMAIN_SIZE:
        raise InvalidParameterError(
            "domain_size", domain_size, f"an integer in [{minimum}, {MAX_DOMAIN_SIZE}]"
        )
    return d


def _finite(spec: str, text: str, allowed: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise InvalidParameterError("population", spec, allowed) from None
    if not math.isfinite(x):
        raise InvalidParameterError("population", spec, allowed)
    return x


# --------------------------------------------------------------------------------------------------------
# Base classes


class Population(ABC):
    """A simulated population: either categorical (values 0..D-1) or numeric (reals in [lo, hi])."""

    kind: ClassVar[Literal["categorical", "numeric"]]

    @property
    @abstractmethod
    def spec(self) -> str:
        """The spec string that :func:`parse_population` turns back into this population."""


class CategoricalPopulation(Population):
    """A distribution over the values 0..D-1 of a domain of size D (chosen at sampling time)."""

    kind: ClassVar[Literal["categorical", "numeric"]] = "categorical"

    @property
    def support_size(self) -> int:
        """The smallest domain size this population fits in (1 unless the population has fixed values)."""
        return 1

    @abstractmethod
    def _weights(self, domain_size: int) -> NDArray[np.float64]:
        """Non-negative weights of the values 0..domain_size-1 (not necessarily normalised)."""

    def _check_domain(self, domain_size: object) -> int:
        d = _check_domain_size(domain_size, self.support_size)
        if d < self.support_size:
            raise InvalidParameterError(
                "domain_size",
                domain_size,
                f"at least {self.support_size}, the number of values of population {self.spec!r}",
            )
        return d

    def probabilities(self, domain_size: int) -> NDArray[np.float64]:
        """P(value = i) for i in 0..domain_size-1; sums to 1 (up to float rounding)."""
        d = self._check_domain(domain_size)
        w = self._weights(d)
        return np.asarray(w / float(w.sum()), dtype=np.float64)

    def labels(self, domain_size: int) -> tuple[str, ...]:
        """Display labels of the values 0..domain_size-1: "0".."D-1" unless the population names them."""
        d = self._check_domain(domain_size)
        return tuple(str(i) for i in range(d))

    def sample_counts(self, n_users: int, domain_size: int, rng: np.random.Generator) -> NDArray[np.int64]:
        """How many of ``n_users`` independent users hold each value: one exact multinomial draw.

        For simulation only. Cost is O(D) whatever ``n_users`` (numpy draws a multinomial as D
        conditional binomials), so 10^9 users take no longer than 10^3.
        """
        n = _check_n_users(n_users)
        g = _check_rng(rng)
        probs = self.probabilities(domain_size)
        return g.multinomial(n, probs).astype(np.int64, copy=False)

    def iter_values(
        self,
        n_users: int,
        domain_size: int,
        rng: np.random.Generator,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> Iterator[NDArray[np.int64]]:
        """Each user's value (iid), in chunks of at most ``chunk_size`` users. For simulation only.

        Inverse-CDF sampling: value = the first i with u < F(i) for u uniform on [0, 1). The CDF is
        pinned to exactly 1 from the last value with positive probability on, so a value of probability
        zero is never drawn, whatever the float rounding of the cumulative sum.
        """
        n = _check_n_users(n_users)
        g = _check_rng(rng)
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise InvalidParameterError("chunk_size", chunk_size, "an integer >= 1")
        probs = self.probabilities(domain_size)
        cdf = np.cumsum(probs)
        last = int(np.flatnonzero(probs > 0)[-1])
        cdf[last:] = 1.0
        done = 0
        while done < n:
            size = min(chunk_size, n - done)
            u = g.random(size)
            yield np.searchsorted(cdf, u, side="right").astype(np.int64, copy=False)
            done += size

    def sample_values(
        self,
        n_users: int,
        domain_size: int,
        rng: np.random.Generator,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> NDArray[np.int64]:
        """Each of ``n_users`` users' value (iid), as one int64 array. For simulation only.

        Use :meth:`iter_values` when the whole array would not fit in memory.
        """
        n = _check_n_users(n_users)
        out = np.empty(n, dtype=np.int64)
        pos = 0
        for chunk in self.iter_values(n, domain_size, rng, chunk_size=chunk_size):
            out[pos : pos + chunk.size] = chunk
            pos += chunk.size
        return out


# --------------------------------------------------------------------------------------------------------
# Categorical populations


@dataclass(frozen=True, kw_only=True)
class ZipfPopulation(CategoricalPopulation):
    """Zipf's law over ranks 1..D: P(rank r) = r^-s / H(D, s) with H(D, s) = sum_{r<=D} r^-s.

    Value i (0-based) has rank i+1, so value 0 is the most frequent. (Zipf 1949; the usual model of
    word, URL and app frequencies in the LDP literature, e.g. Wang et al., USENIX Security 2017.)
    """

    s: float

    def __post_init__(self) -> None:
        if isinstance(self.s, bool) or not isinstance(self.s, int | float):
            raise InvalidParameterError("s", self.s, "a finite number > 0")
        if not math.isfinite(self.s) or self.s <= 0:
            raise InvalidParameterError("s", self.s, "a finite number > 0")

    @property
    def spec(self) -> str:
        return f"zipf:{self.s!r}"

    def _weights(self, domain_size: int) -> NDArray[np.float64]:
        ranks = np.arange(1, domain_size + 1, dtype=np.float64)
        return np.power(ranks, -float(self.s))


@dataclass(frozen=True, kw_only=True)
class UniformPopulation(CategoricalPopulation):
    """Every value 0..D-1 with probability 1/D."""

    @property
    def spec(self) -> str:
        return "uniform"

    def _weights(self, domain_size: int) -> NDArray[np.float64]:
        return np.ones(domain_size, dtype=np.float64)


@dataclass(frozen=True, kw_only=True)
class GeometricPopulation(CategoricalPopulation):
    """Geometric(p) on 0, 1, 2, ... truncated to 0..D-1 and renormalised.

    P(i) = (1-p)^i p / (1 - (1-p)^D): the untruncated geometric puts (1-p)^D on values >= D, and that
    mass is spread proportionally over the domain rather than piled on the last value.
    """

    p: float

    def __post_init__(self) -> None:
        if isinstance(self.p, bool) or not isinstance(self.p, int | float):
            raise InvalidParameterError("p", self.p, "a probability in (0, 1)")
        if not 0.0 < self.p < 1.0:
            raise InvalidParameterError("p", self.p, "a probability in (0, 1)")

    @property
    def spec(self) -> str:
        return f"geometric:{self.p!r}"

    def _weights(self, domain_size: int) -> NDArray[np.float64]:
        # (1-p)^i as exp(i log1p(-p)): accurate for small p; far tails underflow harmlessly to 0.
        i = np.arange(domain_size, dtype=np.float64)
        return np.exp(i * math.log1p(-float(self.p)))


@dataclass(frozen=True, kw_only=True)
class DirichletPopulation(CategoricalPopulation):
    """A seeded random distribution over the D values: weights Dirichlet(alpha 1_D), drawn from
    ``SeedSequence([seed, D])`` (the same D and seed give the same distribution). Read as the full joint
    of several categorical attributes (row-major), a known joint in which the attributes depend on each
    other (issue 18: marginals)."""

    alpha: float
    seed: int

    def __post_init__(self) -> None:
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, int | float) or not self.alpha > 0:
            raise InvalidParameterError("alpha", self.alpha, "a number > 0")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise InvalidParameterError("seed", self.seed, "an integer >= 0")

    @property
    def spec(self) -> str:
        return f"dirichlet:{self.alpha!r},{self.seed}"

    def _weights(self, domain_size: int) -> NDArray[np.float64]:
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, domain_size]))
        return np.asarray(rng.dirichlet(np.full(domain_size, float(self.alpha))), dtype=np.float64)


@dataclass(frozen=True, kw_only=True)
class EmpiricalPopulation(CategoricalPopulation):
    """The distribution of observed counts: value ``values[i]`` with probability counts[i] / sum(counts).

    The values are the first ``len(values)`` indices of the domain, in the given order; a larger domain
    gets extra values of probability 0 (labelled ``<unused-i>``); a smaller one is an error.
    """

    values: tuple[str, ...]
    counts: tuple[int, ...]
    source: str = "<memory>"
    _total: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.values) != len(self.counts) or not self.values:
            raise InvalidParameterError(
                "values", self.values, f"a non-empty tuple of the same length as counts ({len(self.counts)})"
            )
        seen: set[str] = set()
        for v in self.values:
            if not isinstance(v, str) or not v:
                raise InvalidParameterError("values", v, "non-empty strings")
            if v in seen:
                raise InvalidParameterError("values", v, "distinct values (this one is repeated)")
            seen.add(v)
        for c in self.counts:
            if isinstance(c, bool) or not isinstance(c, int) or c < 0:
                raise InvalidParameterError("counts", c, "non-negative integers")
        total = sum(self.counts)
        if total == 0:
            raise InvalidParameterError("counts", self.counts, "at least one positive count")
        object.__setattr__(self, "_total", total)

    @classmethod
    def from_counts(cls, counts: Mapping[str, int], *, source: str = "<memory>") -> EmpiricalPopulation:
        """From a mapping value -> count (insertion order gives the value indices)."""
        return cls(values=tuple(counts), counts=tuple(counts.values()), source=source)

    @classmethod
    def from_csv(cls, path: str | Path) -> EmpiricalPopulation:
        """From a CSV file of ``value,count`` lines; see :func:`load_empirical_csv`."""
        return load_empirical_csv(path)

    @property
    def spec(self) -> str:
        return f"empirical:{self.source}"

    @property
    def support_size(self) -> int:
        return len(self.values)

    @property
    def total(self) -> int:
        """The sum of the counts."""
        return self._total

    def _weights(self, domain_size: int) -> NDArray[np.float64]:
        w = np.zeros(domain_size, dtype=np.float64)
        w[: len(self.counts)] = np.asarray(self.counts, dtype=np.float64)
        return w

    def labels(self, domain_size: int) -> tuple[str, ...]:
        d = self._check_domain(domain_size)
        taken = set(self.values)
        extra: list[str] = []
        for i in range(len(self.values), d):
            label = f"<unused-{i}>"
            while label in taken:  # a CSV could contain the placeholder itself; keep labels distinct
                label += "'"
            taken.add(label)
            extra.append(label)
        return self.values + tuple(extra)


def load_empirical_csv(path: str | Path) -> EmpiricalPopulation:
    """Read an empirical population from a CSV file of ``value,count`` lines.

    Format: UTF-8 (a byte-order mark is ignored), standard CSV quoting (so a value may contain a comma
    when quoted), two fields per line. Whitespace around each field is stripped. Line 1 is a header, and
    skipped, exactly when its count field contains no digit (so ``value,count`` is a header while ``a,-3`` is
    a data line with a bad count). Blank lines at the end of the
    file are ignored; anywhere else they are errors. Values are strings and must be non-empty and
    distinct; counts are non-negative integers (decimal digits), and at least one must be positive.

    Raises:
        InvalidParameterError: naming the file, the line and the offending value.
    """
    p = Path(path)
    where = f"empirical CSV {str(p)!r}"
    try:
        text = p.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidParameterError(
            "population", f"empirical:{p}", f"a readable UTF-8 CSV file ({type(exc).__name__}: {exc})"
        ) from None
    try:
        rows = [(line_no, row) for line_no, row in _numbered_rows(text)]
    except csv.Error as exc:
        raise InvalidParameterError(where, str(p), f"well-formed CSV ({exc})") from None
    while rows and all(not f.strip() for f in rows[-1][1]):
        rows.pop()
    values: list[str] = []
    counts: list[int] = []
    first_line: dict[str, int] = {}
    for idx, (line_no, row) in enumerate(rows):
        at = f"{where} line {line_no}"
        if not row or all(not f.strip() for f in row):
            raise InvalidParameterError(
                at, "", "a value,count line (blank lines only at the end of the file)"
            )
        if len(row) != 2:
            raise InvalidParameterError(at, ",".join(row), "exactly two fields: value,count")
        value, count_text = row[0].strip(), row[1].strip()
        if idx == 0 and not any(ch.isdigit() for ch in count_text):
            continue  # header line: its count field has no digit at all (e.g. "value,count")
        if not value:
            raise InvalidParameterError(f"{at} value", value, "a non-empty value")
        if not _COUNT_RE.fullmatch(count_text):
            allowed = "a non-negative integer count" + (
                " (negative counts are not allowed)" if count_text.startswith("-") else ""
            )
            raise InvalidParameterError(f"{at} count", count_text, allowed)
        if value in first_line:
            raise InvalidParameterError(
                f"{at} value", value, f"distinct values (already on line {first_line[value]})"
            )
        first_line[value] = line_no
        values.append(value)
        counts.append(int(count_text))
    if not values:
        raise InvalidParameterError(where, str(p), "at least one value,count line")
    if sum(counts) == 0:
        raise InvalidParameterError(where, str(p), "at least one positive count (all counts are 0)")
    return EmpiricalPopulation(values=tuple(values), counts=tuple(counts), source=str(p))


def _numbered_rows(text: str) -> Iterator[tuple[int, list[str]]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    start = 1
    for row in reader:
        # A row starts on the line after the previous row ended (line_num counts physical lines read).
        yield start, row
        start = reader.line_num + 1


# --------------------------------------------------------------------------------------------------------
# Numeric populations


class NumericPopulation(Population):
    """A distribution of real values in [lo, hi] (for mean estimation)."""

    kind: ClassVar[Literal["categorical", "numeric"]] = "numeric"
    lo: float
    hi: float

    @property
    @abstractmethod
    def mean(self) -> float:
        """The exact population mean."""

    @property
    @abstractmethod
    def variance(self) -> float:
        """The exact population variance."""

    @abstractmethod
    def _draw(self, size: int, rng: np.random.Generator) -> NDArray[np.float64]:
        """``size`` iid values."""

    def iter_reals(
        self, n_users: int, rng: np.random.Generator, *, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> Iterator[NDArray[np.float64]]:
        """Each user's value (iid), in chunks of at most ``chunk_size``. For simulation only."""
        n = _check_n_users(n_users)
        g = _check_rng(rng)
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise InvalidParameterError("chunk_size", chunk_size, "an integer >= 1")
        done = 0
        while done < n:
            size = min(chunk_size, n - done)
            yield self._draw(size, g)
            done += size

    def sample_reals(self, n_users: int, rng: np.random.Generator) -> NDArray[np.float64]:
        """Each of ``n_users`` users' value (iid), as one float64 array. For simulation only."""
        n = _check_n_users(n_users)
        return np.concatenate(list(self.iter_reals(n, rng)))


def _check_bounds(lo: object, hi: object) -> None:
    for name, v in (("lo", lo), ("hi", hi)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise InvalidParameterError(name, v, "a finite number")
    if not lo < hi:  # type: ignore[operator]
        raise InvalidParameterError("hi", hi, f"a number above lo={lo!r}")


def _norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _norm_pdf(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


@dataclass(frozen=True, kw_only=True)
class TruncatedNormalPopulation(NumericPopulation):
    """normal(mu, sigma^2) conditioned on [lo, hi] (truncated, not clipped), sampled by rejection.

    With a = (lo-mu)/sigma, b = (hi-mu)/sigma and Z = Phi(b) - Phi(a):
    mean = mu + sigma (phi(a) - phi(b)) / Z and
    variance = sigma^2 [1 + (a phi(a) - b phi(b)) / Z - ((phi(a) - phi(b)) / Z)^2]
    (Johnson, Kotz, Balakrishnan, vol. 1, §13.10). Rejection (draw normals, keep those in range) is exact
    in distribution; it is refused when Z < 0.01, i.e. when over 100 draws would be needed per value.
    """

    mu: float
    sigma: float
    lo: float = -1.0
    hi: float = 1.0
    _mass: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.mu, bool) or not isinstance(self.mu, int | float) or not math.isfinite(self.mu):
            raise InvalidParameterError("mu", self.mu, "a finite number")
        if (
            isinstance(self.sigma, bool)
            or not isinstance(self.sigma, int | float)
            or not math.isfinite(self.sigma)
            or self.sigma <= 0
        ):
            raise InvalidParameterError("sigma", self.sigma, "a finite number > 0")
        _check_bounds(self.lo, self.hi)
        a, b = self._standardized()
        # Phi(b) - Phi(a) from the side where both tails are small, to avoid cancellation near 1.
        mass = _norm_cdf(b) - _norm_cdf(a) if a <= 0 else _norm_cdf(-a) - _norm_cdf(-b)
        if mass < _MIN_TRUNCATED_MASS:
            raise InvalidParameterError(
                "normal",
                f"mu={self.mu!r}, sigma={self.sigma!r} on [{self.lo!r}, {self.hi!r}]",
                f"parameters putting at least {_MIN_TRUNCATED_MASS} of the normal's mass in [lo, hi] "
                f"(this puts {mass:.3g})",
            )
        object.__setattr__(self, "_mass", mass)

    def _standardized(self) -> tuple[float, float]:
        return (self.lo - self.mu) / self.sigma, (self.hi - self.mu) / self.sigma

    @property
    def spec(self) -> str:
        return f"normal:{self.mu!r},{self.sigma!r},{self.lo!r},{self.hi!r}"

    @property
    def mass(self) -> float:
        """Z = P(lo <= X <= hi) for the untruncated normal."""
        return self._mass

    @property
    def mean(self) -> float:
        a, b = self._standardized()
        return self.mu + self.sigma * (_norm_pdf(a) - _norm_pdf(b)) / self._mass

    @property
    def variance(self) -> float:
        a, b = self._standardized()
        z = self._mass
        r = (_norm_pdf(a) - _norm_pdf(b)) / z
        return self.sigma**2 * (1.0 + (a * _norm_pdf(a) - b * _norm_pdf(b)) / z - r * r)

    def _draw(self, size: int, rng: np.random.Generator) -> NDArray[np.float64]:
        out = np.empty(size, dtype=np.float64)
        filled = 0
        while filled < size:
            need = size - filled
            # Draw a little more than the expected requirement so one round usually suffices.
            batch = int(need / self._mass * 1.05) + 64
            x = rng.normal(self.mu, self.sigma, batch)
            x = x[(x >= self.lo) & (x <= self.hi)][:need]
            out[filled : filled + x.size] = x
            filled += x.size
        return out


@dataclass(frozen=True, kw_only=True)
class UniformNumericPopulation(NumericPopulation):
    """Continuous uniform on [lo, hi]: mean (lo+hi)/2, variance (hi-lo)^2/12."""

    lo: float
    hi: float

    def __post_init__(self) -> None:
        _check_bounds(self.lo, self.hi)

    @property
    def spec(self) -> str:
        return f"uniform-num:{self.lo!r},{self.hi!r}"

    @property
    def mean(self) -> float:
        return 0.5 * (self.lo + self.hi)

    @property
    def variance(self) -> float:
        return (self.hi - self.lo) ** 2 / 12.0

    def _draw(self, size: int, rng: np.random.Generator) -> NDArray[np.float64]:
        return rng.uniform(self.lo, self.hi, size)


# --------------------------------------------------------------------------------------------------------
# Spec parsing


def parse_population(spec: str) -> Population:
    """Parse a population spec (grammar in the module docstring).

    Examples: ``"zipf:1.1"``, ``"uniform"``, ``"geometric:0.3"``, ``"empirical:data/apps.csv"``,
    ``"normal:0,0.5"`` (truncated to [-1, 1]), ``"normal:10,2,0,20"``, ``"uniform-num:-1,1"``.

    Raises:
        InvalidParameterError: unknown name, wrong number of arguments or a bad number; the message names
            the spec and lists the allowed forms.
    """
    if not isinstance(spec, str):
        raise InvalidParameterError("population", spec, ALLOWED_POPULATIONS)
    text = spec.strip()
    name, sep, arg_text = text.partition(":")
    name = name.strip().lower()
    if name == "empirical":
        path = arg_text.strip()
        if not sep or not path:
            raise InvalidParameterError("population", spec, "empirical:PATH with the path of a CSV file")
        return load_empirical_csv(path)
    args = [a.strip() for a in arg_text.split(",")] if sep else []
    if name in STRING_POPULATIONS:  # generated strings, as the empirical population of their weights
        counts = string_population_counts(spec, name, args)
        return EmpiricalPopulation.from_counts(counts, source=f"generated {name}:{','.join(args)}")
    allowed = ALLOWED_POPULATIONS
    try:
        if name == "zipf":
            allowed = "zipf:S with a finite S > 0, e.g. zipf:1.1"
            if len(args) != 1:
                raise InvalidParameterError("population", spec, allowed)
            return ZipfPopulation(s=_finite(spec, args[0], allowed))
        if name == "uniform":
            if args:
                raise InvalidParameterError(
                    "population", spec, "uniform with no arguments (for reals use uniform-num:LO,HI)"
                )
            return UniformPopulation()
        if name == "geometric":
            allowed = "geometric:P with 0 < P < 1, e.g. geometric:0.3"
            if len(args) != 1:
                raise InvalidParameterError("population", spec, allowed)
            return GeometricPopulation(p=_finite(spec, args[0], allowed))
        if name == "dirichlet":
            allowed = "dirichlet:ALPHA,SEED with ALPHA > 0 and SEED an integer >= 0, e.g. dirichlet:0.5,7"
            if len(args) != 2 or not _COUNT_RE.fullmatch(args[1]):
                raise InvalidParameterError("population", spec, allowed)
            return DirichletPopulation(alpha=_finite(spec, args[0], allowed), seed=int(args[1]))
        if name == "normal":
            allowed = "normal:MU,SIGMA or normal:MU,SIGMA,LO,HI with finite numbers, SIGMA > 0, LO < HI"
            if len(args) not in (2, 4):
                raise InvalidParameterError("population", spec, allowed)
            nums = [_finite(spec, a, allowed) for a in args]
            if len(nums) == 2:
                return TruncatedNormalPopulation(mu=nums[0], sigma=nums[1])
            return TruncatedNormalPopulation(mu=nums[0], sigma=nums[1], lo=nums[2], hi=nums[3])
        if name == "uniform-num":
            allowed = "uniform-num:LO,HI with finite numbers LO < HI, e.g. uniform-num:-1,1"
            if len(args) != 2:
                raise InvalidParameterError("population", spec, allowed)
            lo, hi = (_finite(spec, a, allowed) for a in args)
            return UniformNumericPopulation(lo=lo, hi=hi)
    except InvalidParameterError as exc:
        if exc.field == "population":
            raise
        # A parameter-level error (e.g. s <= 0): restate it with the spec so the user sees what they typed.
        raise InvalidParameterError("population", spec, f"{allowed} ({exc.field}: {exc.allowed})") from exc
    raise InvalidParameterError("population", spec, ALLOWED_POPULATIONS)


def parse_categorical_population(spec: str) -> CategoricalPopulation:
    """:func:`parse_population`, refusing numeric populations."""
    pop = parse_population(spec)
    if not isinstance(pop, CategoricalPopulation):
        raise InvalidParameterError("population", spec, f"a categorical population: {_CATEGORICAL_ALLOWED}")
    return pop


def parse_numeric_population(spec: str) -> NumericPopulation:
    """:func:`parse_population`, refusing categorical populations."""
    pop = parse_population(spec)
    if not isinstance(pop, NumericPopulation):
        raise InvalidParameterError("population", spec, f"a numeric population: {_NUMERIC_ALLOWED}")
    return pop
