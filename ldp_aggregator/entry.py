"""The ``ldp-aggregator`` console command: says which extra to install when it is missing.

Kept free of third-party imports so that a bare ``pip install ldp-collect`` (the client only) gets one
line naming the ``aggregator`` extra, not a ModuleNotFoundError traceback.
"""

from __future__ import annotations

from ldp_client._extras import run_command

__all__ = ["AGGREGATOR_PACKAGES", "main"]

AGGREGATOR_PACKAGES = (
    "numpy",
    "scipy",
    "typer",
    "click",
    "rich",
    "prometheus_client",
    "grpc_health",
    "grpc_reflection",
    "uvloop",
)
"""Top-level modules of the ``aggregator`` extra (pyproject.toml)."""


def main() -> None:
    """Console-script entry point (``ldp-aggregator``)."""
    run_command("ldp-aggregator", "aggregator", "ldp_aggregator.cli", AGGREGATOR_PACKAGES)
