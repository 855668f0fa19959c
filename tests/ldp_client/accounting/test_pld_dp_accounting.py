"""The numerical accountant (issue 17) against Google's dp-accounting (the ``dev`` extra; tests and benches
only) at several points: randomized response (binary and k-ary), Laplace, Gaussian and a mixed composition.

Both are pessimistic on the same grid, so they agree within about k grid steps (dp-accounting's Gaussian and
Laplace use "connect the dots", slightly tighter than rounding up; its randomized response rounds a loss
computed from p). Exact comparisons are in ``test_pld.py``.
"""

from __future__ import annotations

import math

import pytest

from ldp_client.accounting import pld as P

STEP = 1e-4

dp_pld = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")


def _agree(ours: float, theirs: float, k: int) -> None:
    """Both pessimistic on the same grid: within about k steps of each other (their Gaussian and Laplace
    use "connect the dots", slightly tighter than rounding up, and their RR a loss rounded from p)."""
    assert ours == pytest.approx(theirs, abs=1.5 * k * STEP + 1e-9)


@pytest.mark.parametrize(("eps", "k"), [(1.0, 10), (0.5, 100), (3.0, 5)])
def test_randomized_response_against_dp_accounting(eps: float, k: int) -> None:
    noise = 2 / (math.exp(eps) + 1)  # dp-accounting's RR: the true value w.p. 1 - noise + noise / 2
    theirs = dp_pld.from_randomized_response(noise, 2, value_discretization_interval=STEP).self_compose(k)
    ours = P.randomized_response(eps).self_compose(k)
    for delta in (1e-3, 1e-6, 1e-9):
        _agree(ours.epsilon_for_delta(delta), theirs.get_epsilon_for_delta(delta), k)


def test_kary_randomized_response_against_dp_accounting() -> None:
    eps, k, reports = 1.5, 10, 20
    noise = k / (math.exp(eps) + k - 1)  # truth w.p. 1 - noise + noise / k = e^eps / (e^eps + k - 1)
    theirs = dp_pld.from_randomized_response(noise, k, value_discretization_interval=STEP).self_compose(
        reports
    )
    ours = P.randomized_response(eps, k).self_compose(reports)
    for delta in (1e-4, 1e-8):
        _agree(ours.epsilon_for_delta(delta), theirs.get_epsilon_for_delta(delta), reports)


@pytest.mark.parametrize(("scale", "k"), [(1.0, 1), (2.0, 20), (10.0, 100)])
def test_laplace_against_dp_accounting(scale: float, k: int) -> None:
    theirs = dp_pld.from_laplace_mechanism(scale, value_discretization_interval=STEP).self_compose(k)
    ours = P.laplace(scale).self_compose(k)
    for delta in (1e-5, 1e-9):
        _agree(ours.epsilon_for_delta(delta), theirs.get_epsilon_for_delta(delta), k)
    assert ours.delta_for_epsilon(1.0) == pytest.approx(
        theirs.get_delta_for_epsilon(1.0), rel=0.02, abs=1e-12
    )


@pytest.mark.parametrize(("sigma", "k"), [(1.0, 1), (2.0, 20), (10.0, 100)])
def test_gaussian_against_dp_accounting(sigma: float, k: int) -> None:
    theirs = dp_pld.from_gaussian_mechanism(sigma, value_discretization_interval=STEP).self_compose(k)
    ours = P.gaussian(sigma).self_compose(k)
    for delta in (1e-5, 1e-9):
        _agree(ours.epsilon_for_delta(delta), theirs.get_epsilon_for_delta(delta), k)


def test_heterogeneous_composition_against_dp_accounting() -> None:
    ours = P.compose([(P.randomized_response(0.5), 10), P.laplace(2.0), (P.gaussian(3.0), 5)])
    theirs = (
        dp_pld.from_randomized_response(2 / (math.exp(0.5) + 1), 2, value_discretization_interval=STEP)
        .self_compose(10)
        .compose(dp_pld.from_laplace_mechanism(2.0, value_discretization_interval=STEP))
        .compose(dp_pld.from_gaussian_mechanism(3.0, value_discretization_interval=STEP).self_compose(5))
    )
    for delta in (1e-4, 1e-7):
        _agree(ours.epsilon_for_delta(delta), theirs.get_epsilon_for_delta(delta), 16)
