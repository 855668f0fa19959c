"""Issue 13, item 12: ``ldp-sim`` says in one line when the intervals' normal approximation is poor."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ldp_client.params import BinaryRRParams, GRRParams, OUEParams, RapporParams
from simulations.metrics import MIN_EXPECTED_SUPPORTS, interval_warning

LDP_SIM = Path(sys.executable).with_name("ldp-sim")


def test_warns_below_ten_expected_false_supports() -> None:
    params = GRRParams.from_epsilon(37, 0.7)  # q* = 0.0263: n q* = 5.3 at n = 200
    text = interval_warning(params, 200)
    assert text is not None and "\n" not in text
    assert text.startswith("warning: only 5.26 false supports expected per item (n q* < 10)")
    assert "at least 381 users" in text
    assert interval_warning(params, 381) is None  # 381 q* = 10.02
    assert interval_warning(params, 380) is not None


def test_other_mechanisms_and_orientation() -> None:
    rr = BinaryRRParams.from_epsilon(1.0)  # q* = 0.27 for "yes", 1 - P(yes|yes) = 0.27 for "no"
    assert interval_warning(rr, 30) is not None
    assert interval_warning(rr, 100) is None
    oue = OUEParams.from_epsilon(64, 4.0)  # q* = 1/(e^4 + 1) = 0.018
    assert interval_warning(oue, 500) is not None
    assert interval_warning(oue, 1000) is None
    # String RAPPOR is decoded by regression with its own calibration: no score-interval warning.
    assert interval_warning(RapporParams(), 10) is None
    assert MIN_EXPECTED_SUPPORTS == 10.0


@pytest.mark.parametrize(("users", "warned"), [(200, True), (2000, False)])
def test_ldp_sim_prints_the_warning(users: int, warned: bool) -> None:
    args = ["--domain", "37", "--users", str(users), "--epsilon", "0.7", "--mode", "sum", "--repeat", "2"]
    proc = subprocess.run(
        [str(LDP_SIM), "run", "--mechanism", "grr", "--population", "zipf:1.1", *args, "--show-items", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "false supports expected" in line]
    assert len(lines) == (1 if warned else 0), proc.stderr
