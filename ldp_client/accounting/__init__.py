"""Privacy accounting: what several reports (or releases) cost together, and what a shuffler buys.

- :mod:`~ldp_client.accounting.composition` (pure Python, no numpy: a device's ledger uses it): basic,
  advanced (Dwork-Rothblum-Vadhan) and optimal (Kairouz-Oh-Viswanath) composition of (epsilon, delta).
- :mod:`~ldp_client.accounting.pld` (numpy, imported by its functions): privacy loss distributions,
  pessimistically discretised and composed by FFT, for randomized response (every pure eps-DP mechanism),
  Laplace and Gaussian mechanisms: tight epsilon(delta) and delta(epsilon) of any mix of them.
- :mod:`~ldp_client.accounting.shuffle`: the central (epsilon, delta) of eps0-LDP reports shuffled
  together (Feldman-McMillan-Talwar: the closed form in pure Python, the numerical bound with numpy and
  scipy).

Importing this package imports no numpy. See docs/privacy-accounting.md.
"""

from ldp_client.accounting.composition import (
    Guarantee,
    advanced_composition,
    advanced_composition_heterogeneous,
    basic_composition,
    optimal_composition_delta,
    optimal_composition_epsilon,
)

__all__ = [
    "Guarantee",
    "advanced_composition",
    "advanced_composition_heterogeneous",
    "basic_composition",
    "optimal_composition_delta",
    "optimal_composition_epsilon",
]
