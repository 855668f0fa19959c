"""Simulating association (issue 5): paired campaigns through the client's encoders and the aggregator's EM.

For simulation only: every draw comes from ``numpy.random.default_rng`` seeded from the config's seed.

A population of N users holds two variables (U, V):

    P(U = u, V = v) = p_u [lambda 1(v = u mod D2) + (1 - lambda) q_v],

with p and q two categorical populations (:mod:`simulations.populations`, e.g. ``zipf:1.1``, over D1 and
D2 values) and ``dependence`` lambda in [0, 1]: lambda = 0 makes them independent, lambda = 1 makes V a
function of U. Each user's pair is encoded by the batch paired encoder
(:func:`ldp_client.mechanisms.paired.encode_batch_paired`), summed into the campaign's accumulator and
serialized as ``ReportBatch`` payloads exactly as the server would retain them, and the association is
estimated by :func:`ldp_aggregator.association.associate_campaign`, the function Analyst.EstimateAssociation
runs. Values of a string-RAPPOR side are the population's labels; ``extra_candidates`` false strings are
added to its dictionary.

Reported per cell: the truth (the users' empirical joint distribution; the ``<other>`` row or column holds
the users whose value is not among the kept candidates), the mean estimate, the mean standard error, the
observed spread across repeats, and the coverage of the intervals; and for the independence test, how
often it rejects at ``alpha`` (its size when lambda = 0, its power otherwise).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldp_aggregator.accumulators import accumulator_for, add_columns
from ldp_aggregator.association import OTHER_LABEL, AssociationResult, associate_campaign
from ldp_aggregator.estimators import normal_quantile
from ldp_aggregator.paired_accumulator import PairedAccumulator
from ldp_client import wire
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.paired import PairedParams, PairedSide, encode_batch_paired, side_spec
from ldp_client.spec import Kind
from simulations.populations import parse_categorical_population

__all__ = [
    "DEFAULT_STRING_VALUES",
    "AssociationConfig",
    "AssociationSimResult",
    "association_table",
    "describe",
    "side_domain",
    "simulate_association",
]

_CHUNK = 1 << 18
DEFAULT_STRING_VALUES = 5
"""Values of a string-RAPPOR side's population unless given (``ldp-sim associate --domain``'s default)."""


def side_domain(params: PairedSide, given: int | None = None) -> int:
    """The number of values of a side's population: fixed by its mechanism (rr, boolean RAPPOR: 2),
    declared by its parameters (grr, basic RAPPOR: the domain), else ``given`` (string RAPPOR, default
    :data:`DEFAULT_STRING_VALUES`)."""
    spec = side_spec(params)
    if spec.fixed_domain_size is not None:
        return spec.fixed_domain_size
    if spec.takes_domain:
        return len(spec.items(params))
    return DEFAULT_STRING_VALUES if given is None else given


@dataclass(frozen=True, kw_only=True)
class AssociationConfig:
    """What to simulate (module docstring).

    Attributes:
        params: the paired campaign's parameters.
        first_population, second_population: categorical population specs of U and V.
        first_domain, second_domain: D1, D2 (2 for rr and boolean-RAPPOR sides).
        dependence: lambda in [0, 1].
        n_users, repeats, seed: users per repeat, independent repeats, root seed.
        confidence: interval level; alpha: level of the independence test.
        extra_candidates: false strings added to a string-RAPPOR side's dictionary.
        max_values: string-RAPPOR sides keep this many largest candidates (+ ``<other>``).
        campaign_id: the paired campaign's id (keys RAPPOR hashing); ``-r<repeat>`` is appended.
    """

    params: PairedParams
    first_population: str = "zipf:1.1"
    second_population: str = "uniform"
    first_domain: int = 5
    second_domain: int = 2
    dependence: float = 0.5
    n_users: int = 100_000
    repeats: int = 1
    seed: int = 0
    confidence: float = 0.95
    alpha: float = 0.05
    extra_candidates: int = 0
    max_values: int = 10
    campaign_id: str = "ldp-sim-assoc"

    def __post_init__(self) -> None:
        if not isinstance(self.params, PairedParams):
            raise InvalidParameterError("params", type(self.params).__name__, "PairedParams")
        for name, lo, hi in (
            ("first_domain", 2, 64),
            ("second_domain", 2, 64),
            ("n_users", 1, 10**8),
            ("repeats", 1, 10_000),
            ("seed", 0, 2**63 - 1),
            ("extra_candidates", 0, 10**6),
            ("max_values", 1, 1000),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise InvalidParameterError(name, value, f"an integer in [{lo}, {hi}]")
        for name in ("dependence",):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
                raise InvalidParameterError(name, value, "a number in [0, 1]")
        for name in ("confidence", "alpha"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not 0.0 < float(value) < 1.0:
                raise InvalidParameterError(name, value, "a number in (0, 1)")
        for side, d in zip(("first", "second"), (self.first_domain, self.second_domain), strict=True):
            side_params = getattr(self.params, side)
            fixed = side_spec(side_params).fixed_domain_size
            if fixed is not None and d != fixed:
                raise InvalidParameterError(f"{side}_domain", d, f"{fixed} for a {side_params.name} side")
            declared = getattr(getattr(side_params, "domain", None), "size", None)
            if declared is not None and declared != d:
                raise InvalidParameterError(f"{side}_domain", d, f"{declared}, the side's declared domain")


@dataclass(frozen=True, kw_only=True, eq=False)
class AssociationSimResult:
    """R repeats of the association of a paired campaign; arrays are (R, U, V) over the result's labels."""

    config: AssociationConfig
    row_labels: tuple[str, ...]
    col_labels: tuple[str, ...]
    truth: NDArray[np.float64]
    estimates: NDArray[np.float64]
    std_errors: NDArray[np.float64]
    covered: NDArray[np.bool_]
    p_values: NDArray[np.float64]

    @property
    def coverage(self) -> float:
        """Fraction of (repeat, cell) intervals that cover the true proportion."""
        return float(self.covered.mean())

    @property
    def rejection_rate(self) -> float:
        """Fraction of repeats where the independence test rejects at ``alpha``."""
        return float(np.mean(self.p_values < self.config.alpha))

    def to_dict(self) -> dict[str, Any]:
        return {
            "row_labels": list(self.row_labels),
            "col_labels": list(self.col_labels),
            "truth": self.truth.mean(axis=0).tolist(),
            "mean_estimate": self.estimates.mean(axis=0).tolist(),
            "mean_std_error": self.std_errors.mean(axis=0).tolist(),
            "coverage": self.coverage,
            "p_values": self.p_values.tolist(),
            "rejection_rate": self.rejection_rate,
            "dependence": self.config.dependence,
            "n_users": self.config.n_users,
            "repeats": self.config.repeats,
            "epsilon": self.config.params.epsilon,
        }


def _labels(params: PairedSide, population: str, domain: int) -> tuple[str, ...]:
    """The strings a string-RAPPOR side's users hold (its candidates are those, and extra false ones); ()
    for a side whose values are its declared items (population value i is the side's item i)."""
    if side_spec(params).kind is Kind.RAPPOR:
        return parse_categorical_population(population).labels(domain)
    return ()


def _pairs(
    cfg: AssociationConfig, rng: np.random.Generator
) -> Iterator[tuple[NDArray[np.int64], NDArray[np.int64]]]:
    p = parse_categorical_population(cfg.first_population).probabilities(cfg.first_domain)
    q = parse_categorical_population(cfg.second_population).probabilities(cfg.second_domain)
    for start in range(0, cfg.n_users, _CHUNK):
        n = min(_CHUNK, cfg.n_users - start)
        u = rng.choice(cfg.first_domain, size=n, p=p)
        coupled = rng.random(n) < cfg.dependence
        v = np.where(coupled, u % cfg.second_domain, rng.choice(cfg.second_domain, size=n, p=q))
        yield u.astype(np.int64), v.astype(np.int64)


def _truth_table(
    counts: NDArray[np.int64], res: AssociationResult, labels: tuple[tuple[str, ...], tuple[str, ...]]
) -> NDArray[np.float64]:
    """The users' joint proportions over the result's row/column labels (unkept values -> <other>)."""

    def index_map(result_labels: tuple[str, ...], side_labels: tuple[str, ...], d: int) -> NDArray[np.intp]:
        if not side_labels:  # rr, boolean, basic: the result's values are the side's values 0..d-1
            return np.arange(d, dtype=np.intp)
        pos = {lab: i for i, lab in enumerate(result_labels)}
        other = pos.get(OTHER_LABEL, -1)
        return np.array([pos.get(lab, other) for lab in side_labels], dtype=np.intp)

    D1, D2 = counts.shape
    rows = index_map(res.row_labels, labels[0], D1)
    cols = index_map(res.col_labels, labels[1], D2)
    out = np.zeros((len(res.row_labels), len(res.col_labels)))
    np.add.at(out, (rows[:, None], cols[None, :]), counts)
    return np.asarray(out / counts.sum(), dtype=np.float64)


def _canonical_order(
    res: AssociationResult, cands: tuple[tuple[str, ...], tuple[str, ...]]
) -> AssociationResult:
    """The result with string-RAPPOR values in dictionary order (``<other>`` last), so that repeats, whose
    kept candidates come ranked by their marginal estimates, line up cell by cell."""

    def order(labels: tuple[str, ...], dictionary: tuple[str, ...]) -> NDArray[np.intp]:
        if not dictionary:
            return np.arange(len(labels), dtype=np.intp)
        rank = {lab: i for i, lab in enumerate(dictionary)}
        return np.array(
            sorted(range(len(labels)), key=lambda i: rank.get(labels[i], len(dictionary))), dtype=np.intp
        )

    r, c = order(res.row_labels, cands[0]), order(res.col_labels, cands[1])
    return dataclasses.replace(
        res,
        row_labels=tuple(res.row_labels[i] for i in r),
        col_labels=tuple(res.col_labels[j] for j in c),
        joint=res.joint[np.ix_(r, c)],
        joint_se=res.joint_se[np.ix_(r, c)],
        joint_low=res.joint_low[np.ix_(r, c)],
        joint_high=res.joint_high[np.ix_(r, c)],
        first=res.first[r],
        first_se=res.first_se[r],
        second=res.second[c],
        second_se=res.second_se[c],
    )


def simulate_association(cfg: AssociationConfig) -> AssociationSimResult:
    """Run ``cfg.repeats`` paired campaigns and compare the association estimates with the truth.

    Raises:
        InvalidParameterError: a bad configuration.
    """
    from ldp_client.wire import CampaignInfo

    params = cfg.params
    labels = (
        _labels(params.first, cfg.first_population, cfg.first_domain),
        _labels(params.second, cfg.second_population, cfg.second_domain),
    )

    def dictionary(side: str, lab: tuple[str, ...]) -> tuple[str, ...]:
        return lab + tuple(f"ldp-sim-extra-{side}-{i}" for i in range(cfg.extra_candidates)) if lab else ()

    cands = (dictionary("first", labels[0]), dictionary("second", labels[1]))
    seeds = np.random.SeedSequence(cfg.seed).spawn(cfg.repeats)
    z = normal_quantile(cfg.confidence)
    truths: list[NDArray[np.float64]] = []
    ests: list[NDArray[np.float64]] = []
    ses: list[NDArray[np.float64]] = []
    covs: list[NDArray[np.bool_]] = []
    pvals: list[float] = []
    res: AssociationResult | None = None
    row_labels: tuple[str, ...] = ()
    col_labels: tuple[str, ...] = ()
    for r, seed in enumerate(seeds):
        rng = np.random.default_rng(seed)
        cid = f"{cfg.campaign_id}-r{r}"
        acc = accumulator_for(params)
        if not isinstance(acc, PairedAccumulator):  # unreachable: accumulator_for(PairedParams)
            raise InvalidParameterError("params", params.name, "paired")
        payloads: list[bytes] = []
        counts = np.zeros((cfg.first_domain, cfg.second_domain), dtype=np.int64)
        for j, (u, v) in enumerate(_pairs(cfg, rng)):
            np.add.at(counts, (u, v), 1)
            cols = encode_batch_paired(
                params,
                campaign_id=cid,
                first_values=u,
                second_values=v,
                rng=rng,
                first_labels=labels[0] or None,
                second_labels=labels[1] or None,
            )
            add_columns(acc, params, cols)
            if acc.joint is None:  # a string-RAPPOR side: keep the raw reports, as the server does
                msg = wire.batch_to_proto(campaign_id=cid, batch_id=f"b{j}", params=params, columns=cols)
                payloads.append(msg.SerializeToString())
        info = CampaignInfo(campaign_id=cid, params=params)
        res = associate_campaign(
            info,
            acc,
            functools.partial(iter, payloads) if payloads else None,
            first_candidates=cands[0],
            second_candidates=cands[1],
            confidence=cfg.confidence,
            max_values=cfg.max_values,
        )
        res = _canonical_order(res, cands)
        truth = _truth_table(counts, res, labels)
        if truths and (res.row_labels, res.col_labels) != (row_labels, col_labels):
            raise InvalidParameterError(
                "max_values",
                cfg.max_values,
                "a number of kept candidates that keeps the same candidates in every repeat (raise it)",
            )
        row_labels, col_labels = res.row_labels, res.col_labels
        truths.append(truth)
        ests.append(res.joint)
        ses.append(res.joint_se)
        covs.append(np.abs(res.joint - truth) <= z * res.joint_se + 1e-12)
        pvals.append(res.p_value)
    if res is None:  # unreachable: repeats >= 1
        raise InvalidParameterError("repeats", cfg.repeats, "at least 1")
    return AssociationSimResult(
        config=cfg,
        row_labels=res.row_labels,
        col_labels=res.col_labels,
        truth=np.stack(truths),
        estimates=np.stack(ests),
        std_errors=np.stack(ses),
        covered=np.stack(covs),
        p_values=np.array(pvals),
    )


def association_table(result: AssociationSimResult) -> Any:
    """A rich Table of every cell: truth, mean estimate, mean SE, observed SD (several repeats), coverage."""
    from rich.table import Table

    params = result.config.params
    table = Table(title=f"joint distribution: {params.first.name} (rows) x {params.second.name} (columns)")
    table.add_column("cell")
    for col in ("truth", "mean estimate", "mean SE", "observed SD", "coverage"):
        table.add_column(col, justify="right")
    truth = result.truth.mean(axis=0)
    est = result.estimates.mean(axis=0)
    se = result.std_errors.mean(axis=0)
    sd = result.estimates.std(axis=0, ddof=1) if result.config.repeats > 1 else None
    cover = result.covered.mean(axis=0)
    for i, r in enumerate(result.row_labels):
        for j, c in enumerate(result.col_labels):
            table.add_row(
                f"{r} x {c}",
                f"{truth[i, j]:.4f}",
                f"{est[i, j]:.4f}",
                f"{se[i, j]:.4f}",
                "" if sd is None else f"{sd[i, j]:.4f}",
                f"{cover[i, j]:.2f}",
            )
    return table


def describe(result: AssociationSimResult) -> list[str]:
    """Lines of a plain-text summary (the CLI prints them under its table)."""
    cfg = result.config
    return [
        f"{cfg.repeats} repeat(s) of {cfg.n_users:,} users, dependence {cfg.dependence:g}, "
        f"epsilon per paired report {cfg.params.epsilon:.4g}",
        f"interval coverage {result.coverage:.3f} over {result.covered.size} cells x repeats "
        f"(nominal {cfg.confidence:g})",
        f"independence test rejects at alpha={cfg.alpha:g} in {result.rejection_rate:.0%} of repeats "
        f"(median p-value {float(np.median(result.p_values)):.3g})",
    ]
