"""Shuffle amplification next to decodes and associations (issue 17): a RAPPOR campaign and a paired
campaign that declare a shuffler carry the central (epsilon, delta) of one shuffled batch in
``DecodeRapporResponse.shuffle`` and ``AssociationResponse.shuffle``, with the same figures as
``EstimateResponse.shuffle`` (one function computes them), in the CLI's JSON and tables, from the store
and from the Dask archive reduce; a campaign without a shuffler has no such field."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from distributed import Client, LocalCluster
from typer.testing import CliRunner

from ldp_aggregator.cli import app
from ldp_aggregator.service import Aggregator, open_store
from ldp_aggregator.store import Store
from ldp_client import registry, wire
from ldp_client.accounting import shuffle
from ldp_client.spec import Kind, MechanismSpec

runner = CliRunner()
SHUFFLER = shuffle.ShufflerDeclaration(batch_reports=1_000_000, delta=1e-6)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(str(tmp_path / "ldp.sqlite3")) as s:
        yield s


@pytest.fixture(scope="module")
def dask() -> Iterator[Client]:
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        yield client


def _spec(kind: Kind) -> MechanismSpec[Any]:
    return next(s for s in registry.SPECS if s.kind is kind)


def _fill(agg: Aggregator, spec: MechanismSpec[Any], cid: str, *, declare: bool) -> None:
    """Create ``cid`` (with the shuffler when ``declare``) and submit 600 encoded reports."""
    params = spec.examples()[0]
    inputs = spec.campaign_inputs(params, cid)
    labels = [str(x) for x in inputs]
    candidates = (*labels, "never.example") if spec.kind is Kind.RAPPOR else ()
    agg.create_campaign(
        wire.campaign_to_proto(
            campaign_id=cid, params=params, candidates=candidates, shuffler=SHUFFLER if declare else None
        )
    )
    rng = np.random.default_rng(17)
    for b in range(4):
        cols = spec.encode_batch(
            params, rng.integers(0, len(labels), 150), rng, campaign_id=cid, labels=labels
        )
        asyncio.run(
            agg.submit_batch(
                wire.batch_to_proto(campaign_id=cid, batch_id=f"b{b}", params=params, columns=cols)
            )
        )


def _expected(agg: Aggregator, cid: str) -> dict[str, Any]:
    """The estimate path's figures for ``cid`` (GetEstimate's ``shuffle``), checked against the bounds."""
    est = agg.estimate_message(cid)
    assert est.HasField("shuffle")
    eps0 = est.epsilon
    sh = est.shuffle
    assert (sh.batch_reports, sh.delta) == (1_000_000, 1e-6)
    assert sh.epsilon_numerical == pytest.approx(shuffle.numerical_epsilon(10**6, eps0, 1e-6))
    assert sh.epsilon_closed_form == pytest.approx(shuffle.closed_form_epsilon(10**6, eps0, 1e-6))
    return {
        "batch_reports": sh.batch_reports,
        "delta": sh.delta,
        "closed_form_applies": sh.closed_form_applies,
        "epsilon_closed_form": sh.epsilon_closed_form,
        "epsilon_numerical": sh.epsilon_numerical,
    }


def _json(args: list[str]) -> Any:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _table(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_decode_and_association_carry_the_estimates_shuffle(
    store: Store, tmp_path: Path, dask: Client
) -> None:
    agg = Aggregator(store)
    rappor, paired = _spec(Kind.RAPPOR), _spec(Kind.PAIRED)
    _fill(agg, rappor, "r", declare=True)
    _fill(agg, paired, "p", declare=True)
    want = {cid: _expected(agg, cid) for cid in ("r", "p")}
    # The paired campaign's eps0 is its report's epsilon (first + second): a different figure.
    assert want["r"]["epsilon_numerical"] != want["p"]["epsilon_numerical"]

    decoded = agg.decode_message("r")
    assert decoded.HasField("shuffle") and decoded.shuffle == agg.estimate_message("r").shuffle
    associated = agg.association_message("p")
    assert associated.HasField("shuffle") and associated.shuffle == agg.estimate_message("p").shuffle

    db = tmp_path / "ldp.sqlite3"
    root = tmp_path / "archive"
    store.close()
    assert _json(["decode", "r", "--json", "--db", str(db)])["shuffle"] == want["r"]
    assert _json(["associate", "p", "--json", "--db", str(db)])["shuffle"] == want["p"]
    line = "shuffled in batches of 1,000,000: central epsilon"
    for command, cid in (("decode", "r"), ("associate", "p")):
        table = _table([command, cid, "--db", str(db)])
        assert f"{line} {want[cid]['epsilon_numerical']:.4g} (numerical)" in table, table

    # The Dask archive reduce gives the same documents and lines.
    assert runner.invoke(app, ["archive", "export", str(root), "--db", str(db)]).exit_code == 0
    scheduler = ["--scheduler", dask.scheduler.address]
    for command, cid in (("decode", "r"), ("associate", "p"), ("estimate", "r")):
        doc = _json(["archive", command, str(root), cid, "--json", *scheduler])
        assert doc["shuffle"] == want[cid], command
        table = _table(["archive", command, str(root), cid, *scheduler])
        assert f"{line} {want[cid]['epsilon_numerical']:.4g} (numerical)" in table, command


def test_no_shuffler_no_field(store: Store, tmp_path: Path) -> None:
    agg = Aggregator(store)
    _fill(agg, _spec(Kind.RAPPOR), "r", declare=False)
    _fill(agg, _spec(Kind.PAIRED), "p", declare=False)
    assert not agg.decode_message("r").HasField("shuffle")
    assert not agg.association_message("p").HasField("shuffle")
    store.close()
    db = str(tmp_path / "ldp.sqlite3")
    assert "shuffle" not in _json(["decode", "r", "--json", "--db", db])
    assert "shuffle" not in _json(["associate", "p", "--json", "--db", db])
    assert "shuffled in batches" not in _table(["decode", "r", "--db", db])
