"""The ``ldp-sim`` console command: says which extra to install when it is missing.

Kept free of third-party imports so that a bare ``pip install ldp-collect`` (the client only) gets one
line naming the ``sim`` extra, not a ModuleNotFoundError traceback.
"""

from __future__ import annotations

from ldp_aggregator.entry import AGGREGATOR_PACKAGES
from ldp_client._extras import run_command

__all__ = ["main"]

SIM_PACKAGES = (*AGGREGATOR_PACKAGES, "matplotlib")
"""Top-level modules of the ``sim`` extra (the aggregator's and matplotlib)."""


def main() -> None:
    """Console-script entry point (``ldp-sim``)."""
    run_command("ldp-sim", "sim", "simulations.cli", SIM_PACKAGES)
