"""Key-value simulations (issue 18): a seeded key-value population; PCKV runs in sum, report and grpc modes.

:class:`KeyValuePopulation`: each user holds 1 to ``max_keys`` distinct keys of d, drawn with Zipf(s)
weights without replacement (Gumbel top-k), and for each key k a value ``lo + (hi - lo) B`` with
B ~ Beta(kappa mu_k, kappa (1 - mu_k)), so key k's value has the known mean ``lo + (hi - lo) mu_k``, mu_k
spread evenly over [mu_lo, mu_hi] = [0.2, 0.8] by default (the value spec ``kv-zipf:S[,keys=K][,kappa=C]``).

:func:`simulate_key_values` draws the population afresh for every repeat, encodes every report with the
vectorised batch encoder (PCKV has no exact sampler of its sums, so ``sum`` encodes every report too),
accumulates them as the server does (``report``) or submits them to an aggregator and reads the Analyst's
``key_values`` (``grpc``), and compares each key's estimated frequency and mean with the realised truth of
the repeat (share of users holding the key; mean value of its holders): MSE, mean estimated variance, their
ratio and the coverage of the intervals (:func:`key_value_metrics`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from ldp_aggregator.accumulators import accumulator_for, add_columns
from ldp_aggregator.key_values import campaign_key_values
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.pckv import PCKVEncoder, PCKVParams

__all__ = [
    "KeyValuePopulation",
    "is_key_value_population",
    "key_value_metrics",
    "parse_key_value_population",
    "simulate_key_values",
]

_PREFIX = "kv-zipf:"
_CHUNK = 1 << 18


def is_key_value_population(spec: str) -> bool:
    """Whether ``--population`` names a key-value population (``kv-zipf:...``)."""
    return spec.startswith(_PREFIX)


@dataclass(frozen=True)
class KeyValuePopulation:
    """Users holding 1..``max_keys`` Zipf(``s``) keys of ``d``, Beta values with known means (module
    docstring)."""

    d: int
    s: float = 1.1
    max_keys: int = 3
    kappa: float = 4.0
    lo: float = -1.0
    hi: float = 1.0
    mu_lo: float = 0.2
    mu_hi: float = 0.8

    def __post_init__(self) -> None:
        if not 1 <= self.max_keys <= self.d:
            raise InvalidParameterError("keys", self.max_keys, f"an integer in [1, d={self.d}]")
        if not 0.0 < self.mu_lo <= self.mu_hi < 1.0:
            raise InvalidParameterError("mu_hi", self.mu_hi, f"0 < mu_lo <= mu_hi < 1 (mu_lo={self.mu_lo})")
        if not (math.isfinite(self.s) and self.s >= 0 and math.isfinite(self.kappa) and self.kappa > 0):
            raise InvalidParameterError(
                "population", f"s={self.s}, kappa={self.kappa}", "s >= 0 and kappa > 0"
            )

    @property
    def mu(self) -> NDArray[np.float64]:
        """Each key's mean value on [0, 1]: evenly over [mu_lo, mu_hi]."""
        return np.linspace(self.mu_lo, self.mu_hi, self.d)

    @property
    def means(self) -> NDArray[np.float64]:
        """Each key's expected value in [lo, hi]."""
        return self.lo + (self.hi - self.lo) * self.mu

    def sample(
        self, n: int, padding: int, rng: np.random.Generator
    ) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """``n`` users: keys (n, padding) with -1 in unused slots, values (n, padding) (0 where unused)."""
        if self.max_keys > padding:
            raise InvalidParameterError("keys", self.max_keys, f"at most the campaign's padding {padding}")
        logw = -self.s * np.log(np.arange(1, self.d + 1, dtype=np.float64))
        gumbel = logw + rng.gumbel(size=(n, self.d))
        top = (
            np.argpartition(-gumbel, self.max_keys - 1, axis=1)[:, : self.max_keys]
            if self.max_keys < self.d
            else np.tile(np.arange(self.d), (n, 1))
        )
        held = rng.integers(1, self.max_keys + 1, size=n)
        keys = np.full((n, padding), -1, dtype=np.int64)
        used = np.arange(self.max_keys)[None, :] < held[:, None]
        keys[:, : self.max_keys] = np.where(used, top, -1)
        mu = self.mu[np.maximum(keys, 0)]
        values = self.lo + (self.hi - self.lo) * rng.beta(self.kappa * mu, self.kappa * (1.0 - mu))
        return keys, np.where(keys >= 0, values, 0.0)

    def truth(
        self, keys: NDArray[np.int64], values: NDArray[np.float64]
    ) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """(users holding each key, sum of their values) of a sample."""
        held = keys >= 0
        k = keys[held]
        counts = np.bincount(k, minlength=self.d).astype(np.int64)
        sums: NDArray[np.float64] = np.bincount(k, weights=values[held], minlength=self.d).astype(np.float64)
        return counts, sums


def parse_key_value_population(spec: str, d: int, lo: float, hi: float) -> KeyValuePopulation:
    """``kv-zipf:S[,keys=K][,kappa=C]`` over ``d`` keys with values in [lo, hi]."""
    if not is_key_value_population(spec):
        raise InvalidParameterError("population", spec, "kv-zipf:S[,keys=K][,kappa=C]")
    parts = spec[len(_PREFIX) :].split(",")
    try:
        s = float(parts[0])
        opts = dict(p.split("=", 1) for p in parts[1:])
        unknown = set(opts) - {"keys", "kappa"}
        if unknown:
            raise ValueError(unknown)
        return KeyValuePopulation(
            d=d, s=s, max_keys=int(opts.get("keys", 3)), kappa=float(opts.get("kappa", 4.0)), lo=lo, hi=hi
        )
    except ValueError:
        raise InvalidParameterError("population", spec, "kv-zipf:S[,keys=K][,kappa=C]") from None


def key_value_metrics(
    truth: NDArray[np.float64], est: NDArray[np.float64], se: NDArray[np.float64], z: float
) -> dict[str, float]:
    """MSE, mean estimated variance, their ratio and the coverage of est +- z se, over every finite entry."""
    ok = np.isfinite(truth) & np.isfinite(est) & np.isfinite(se)
    err = est[ok] - truth[ok]
    mse = float(np.mean(err**2)) if err.size else math.nan
    var = float(np.mean(se[ok] ** 2)) if err.size else math.nan
    return {
        "mse": mse,
        "mean_variance": var,
        "mse_over_variance": mse / var if var > 0 else math.nan,
        "coverage": float(np.mean(np.abs(err) <= z * se[ok])) if err.size else math.nan,
        "entries": int(err.size),
    }


def _accumulate(
    params: PCKVParams, pop: KeyValuePopulation, n: int, rng: np.random.Generator, sink: Any
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Draw, encode and hand to ``sink`` n users' reports in chunks; returns the truth (counts, sums)."""
    enc = PCKVEncoder(params)
    counts = np.zeros(pop.d, dtype=np.int64)
    sums = np.zeros(pop.d)
    done = 0
    while done < n:
        m = min(_CHUNK, n - done)
        keys, values = pop.sample(m, params.padding, rng)
        c, s = pop.truth(keys, values)
        counts += c
        sums += s
        sink(enc.encode_batch(keys, values, rng), done)
        done += m
    return counts, sums


def _add(acc: Any, params: Any, columns: Any, _offset: int) -> None:
    """The report runner's sink: add a chunk's reports to the accumulator as the server does."""
    add_columns(acc, params, columns)


@contextlib.contextmanager
def _grpc_sink(params: Any, server: str | None, campaign_id: str) -> Iterator[tuple[Any, Any]]:
    """(sink submitting batches, function returning the Analyst's key_values rows) of one campaign."""
    from ldp_aggregator._proto.ldp.v1 import analyst_pb2, estimates_pb2
    from ldp_client import wire
    from simulations.runners.grpc_runner import aggregator_session

    with aggregator_session(server) as session:
        campaign = wire.campaign_to_proto(
            campaign_id=campaign_id, params=params, description="ldp-sim key-value"
        )
        session.analyst.CreateCampaign(analyst_pb2.CreateCampaignRequest(campaign=campaign), timeout=60)

        def sink(columns: Any, offset: int) -> None:
            for j in range(0, len(columns), 1 << 16):
                msg = wire.batch_to_proto(
                    campaign_id=campaign_id,
                    batch_id=f"b{offset + j}",
                    params=params,
                    columns=columns[j : j + (1 << 16)],
                )
                session.collector.Submit(msg, timeout=60, wait_for_ready=True)

        def answer(confidence: float) -> Any:
            req = estimates_pb2.EstimateRequest(campaign_id=campaign_id, confidence=confidence)
            return session.analyst.GetEstimate(req, timeout=120)

        yield sink, answer


def simulate_key_values(
    params: PCKVParams,
    pop: KeyValuePopulation,
    *,
    n_users: int,
    repeats: int = 1,
    seed: int = 0,
    mode: str = "sum",
    confidence: float = 0.95,
    server: str | None = None,
    campaign_id: str = "ldp-sim-kv",
) -> dict[str, Any]:
    """Run ``repeats`` seeded repeats (module docstring); JSON-ready metrics and the last repeat's keys.

    Raises:
        InvalidParameterError: ``mode`` is not sum, report or grpc, or the population does not fit.
    """
    from statistics import NormalDist

    if mode not in ("sum", "report", "grpc"):
        raise InvalidParameterError("mode", mode, "sum, report or grpc")
    if pop.d != params.domain.size:
        raise InvalidParameterError("domain", pop.d, f"the campaign's {params.domain.size} keys")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    rows: dict[str, list[NDArray[np.float64]]] = {k: [] for k in ("f", "f_hat", "f_se", "m", "m_hat", "m_se")}
    last: list[dict[str, Any]] = []
    for r, ss in enumerate(np.random.SeedSequence(seed).spawn(repeats)):
        rng = np.random.default_rng(ss)
        if mode == "grpc":
            # A fresh in-process database has no campaigns; a shared server needs unique ids.
            suffix = f"-r{r}" if server is None else f"-{uuid.uuid4().hex[:16]}-r{r}"
            with _grpc_sink(params, server, campaign_id + suffix) as (sink, answer):
                counts, sums = _accumulate(params, pop, n_users, rng, sink)
                resp = answer(confidence)
            kv = list(resp.key_values)
            f_hat = np.array([k.frequency for k in kv])
            f_se = np.array([k.frequency_std_error for k in kv])
            m_hat = np.array([k.mean for k in kv])
            m_se = np.array([k.mean_std_error for k in kv])
        else:
            acc = accumulator_for(cast(Any, params))  # MechanismParams predates pckv (architecture.md)
            counts, sums = _accumulate(params, pop, n_users, rng, functools.partial(_add, acc, params))
            est = campaign_key_values(params, acc, confidence)
            assert est is not None  # a pckv campaign always has key-value estimates
            f_hat = np.array([k.frequency for k in est.items])
            f_se = np.array([k.frequency_std_error for k in est.items])
            m_hat = np.array([k.mean for k in est.items])
            m_se = np.array([k.mean_std_error for k in est.items])
        with np.errstate(invalid="ignore", divide="ignore"):
            true_mean = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        for name, arr in (
            ("f", counts / n_users),
            ("f_hat", f_hat),
            ("f_se", f_se),
            ("m", true_mean),
            ("m_hat", m_hat),
            ("m_se", m_se),
        ):
            rows[name].append(np.asarray(arr, dtype=np.float64))
        last = [
            {"key": params.domain.label(i), "true_frequency": float(counts[i] / n_users),
             "frequency": float(f_hat[i]), "frequency_std_error": float(f_se[i]),
             "true_mean": float(true_mean[i]), "mean": float(m_hat[i]), "mean_std_error": float(m_se[i])}
            for i in range(pop.d)
        ]  # fmt: skip
    st = {k: np.stack(v) for k, v in rows.items()}
    return {
        "mechanism": params.name,
        "mode": mode,
        "n_users": n_users,
        "repeats": repeats,
        "epsilon": params.epsilon,
        "key_epsilon": params.key_epsilon,
        "value_epsilon": params.value_epsilon,
        "padding": params.padding,
        "confidence": confidence,
        "frequency_metrics": key_value_metrics(st["f"], st["f_hat"], st["f_se"], z),
        "mean_metrics": key_value_metrics(st["m"], st["m_hat"], st["m_se"], z),
        "keys": last,
    }
