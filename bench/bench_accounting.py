"""Privacy accounting (issue 17): time and tightness of the accountants, against exact values and Google's
dp-accounting (the ``dev`` extra).

For each case: our epsilon(delta), the exact value where one is known (optimal composition of randomized
response; Balle-Wang's Gaussian formula inverted by bisection), dp-accounting's, and the median time of
both over ``--repeats`` runs. Then the shuffle bounds (closed form, numerical: uncached and cached).

    .venv/bin/python bench/bench_accounting.py --repeats 5
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from statistics import NormalDist

from ldp_client.accounting import optimal_composition_epsilon, pld, shuffle


def _median_time(fn: Callable[[], float], repeats: int) -> tuple[float, float]:
    times = []
    value = math.nan
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return value, statistics.median(times)


def _gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact epsilon(delta) of a Gaussian mechanism with s/sigma = mu (Balle-Wang), by bisection."""
    phi = NormalDist().cdf

    def d(eps: float) -> float:
        return phi(mu / 2 - eps / mu) - math.exp(eps) * phi(-mu / 2 - eps / mu)

    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if d(mid) <= delta else (mid, hi)
    return hi


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--delta", type=float, default=1e-6)
    args = parser.parse_args()
    from dp_accounting.pld import privacy_loss_distribution as dp

    delta, step = args.delta, pld.DEFAULT_STEP
    cases: list[tuple[str, Callable[[], float], float, Callable[[], float]]] = []
    for eps, k in ((0.5, 100), (0.1, 1000)):
        noise = 2 / (math.exp(eps) + 1)
        cases.append(
            (
                f"randomized response eps={eps} x{k}",
                lambda eps=eps, k=k: pld.randomized_response(eps).self_compose(k).epsilon_for_delta(delta),
                optimal_composition_epsilon(eps, k, delta),
                lambda noise=noise, k=k: (
                    dp.from_randomized_response(noise, 2, value_discretization_interval=step)
                    .self_compose(k)
                    .get_epsilon_for_delta(delta)
                ),
            )
        )
    for sigma, k in ((10.0, 100), (2.0, 20)):
        cases.append(
            (
                f"gaussian sigma={sigma} x{k}",
                lambda sigma=sigma, k=k: pld.gaussian(sigma).self_compose(k).epsilon_for_delta(delta),
                _gaussian_epsilon(math.sqrt(k) / sigma, delta),
                lambda sigma=sigma, k=k: (
                    dp.from_gaussian_mechanism(sigma, value_discretization_interval=step)
                    .self_compose(k)
                    .get_epsilon_for_delta(delta)
                ),
            )
        )
    cases.append(
        (
            "laplace b=10 x100",
            lambda: pld.laplace(10.0).self_compose(100).epsilon_for_delta(delta),
            math.nan,
            lambda: (
                dp.from_laplace_mechanism(10.0, value_discretization_interval=step)
                .self_compose(100)
                .get_epsilon_for_delta(delta)
            ),
        )
    )
    print(f"epsilon at delta={delta:g}, grid step {step:g}, median of {args.repeats}")
    print(f"{'case':36} {'ours':>10} {'exact':>10} {'dp-acc.':>10} {'ours s':>8} {'dp-acc. s':>9}")
    for name, ours, exact, theirs in cases:
        v, t = _median_time(ours, args.repeats)
        w, u = _median_time(theirs, args.repeats)
        print(f"{name:36} {v:10.5f} {exact:10.5f} {w:10.5f} {t:8.3f} {u:9.3f}")

    print("\nshuffle amplification, eps0=4, delta=1e-6")
    for n in (10**4, 10**5, 10**6, 10**7):
        closed = shuffle.closed_form_epsilon(n, 4.0, 1e-6)

        def uncached(n: int = n) -> float:
            shuffle._numerical_epsilon.cache_clear()
            return shuffle.numerical_epsilon(n, 4.0, 1e-6)

        v, t = _median_time(uncached, args.repeats)
        _, cached = _median_time(lambda n=n: shuffle.numerical_epsilon(n, 4.0, 1e-6), args.repeats)
        print(
            f"n={n:>9,}: closed form {closed:.5f}  numerical {v:.5f}  "
            f"({t:.3f} s; cached {cached * 1e6:.1f} us)"
        )


if __name__ == "__main__":
    main()
