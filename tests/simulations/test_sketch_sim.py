"""ldp-sim with the sketches (cms, hcms): in grpc mode a candidate dictionary lives with the campaign and is
estimated through Analyst.GetEstimate (RAPPOR's decoder, Analyst.DecodeRappor, is for kind RAPPOR only)."""

from __future__ import annotations

import numpy as np
import pytest

from simulations.runners import SimulationConfig, simulate


@pytest.mark.parametrize("mechanism", ["cms", "hcms"])
def test_grpc_mode_estimates_a_candidate_dictionary(mechanism: str) -> None:
    config = SimulationConfig(
        mechanism=mechanism,
        population="zipf:1.2",
        domain=500,
        epsilon=3.0,
        params={"k": 8, "m": 64},
        n_users=2000,
        seed=9,
        candidates=("0", "1", "7", "not a population value"),
        mode="grpc",
        batch_size=700,
        workers=1,
    )
    res = simulate(config)
    assert res.labels == config.candidates and res.detected is None
    assert (res.truth[:, 3] == 0).all() and (res.n_reports == 2000).all()
    # Seeded: each estimate within 6 of its standard errors (collision term included) of the truth.
    assert (np.abs(res.estimates - res.truth) <= 6 * res.std_errors).all()
