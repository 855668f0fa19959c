"""A database written by an earlier release opens with the current code and answers exactly the same.

``tests/fixtures/release.sqlite3`` and ``release_answers.json`` were written by
``tests/fixtures/make_db_fixture.py`` on the release the answers file names: a campaign per mechanism
with reports, and the serialized EstimateResponse / DecodeRapporResponse / AssociationResponse that release
gave. The current code must migrate the file if needed and give the same bytes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ldp_aggregator.analysis import estimate_to_proto
from ldp_aggregator.association import association_to_proto
from ldp_aggregator.rappor_decode import decode_to_proto
from ldp_aggregator.service import Aggregator, open_store

FIXTURES = Path(__file__).parents[1] / "fixtures"
ANSWERS: dict[str, Any] = json.loads((FIXTURES / "release_answers.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def aggregator(tmp_path_factory: pytest.TempPathFactory) -> Any:
    db = tmp_path_factory.mktemp("release") / "release.sqlite3"
    shutil.copyfile(FIXTURES / "release.sqlite3", db)
    store = open_store(str(db))
    yield Aggregator(store)
    store.close()


def test_every_campaign_is_there(aggregator: Aggregator) -> None:
    listed = {c.id for c in aggregator.list_campaigns()}
    assert listed == set(ANSWERS["campaigns"])


@pytest.mark.parametrize("cid", sorted(ANSWERS["campaigns"]))
def test_answers_are_unchanged(aggregator: Aggregator, cid: str) -> None:
    pinned = ANSWERS["campaigns"][cid]
    if "decode" in pinned:
        cands = [f"value-{i}" for i in range(8)]
        est = estimate_to_proto(aggregator.estimate(cid, candidates=cands))
        assert est.SerializeToString(deterministic=True).hex() == pinned["estimate"]
        dec = decode_to_proto(aggregator.decode_rappor(cid, candidates=cands), cid)
        assert dec.SerializeToString(deterministic=True).hex() == pinned["decode"]
    elif "association" in pinned:
        campaign = aggregator.get_campaign(cid)
        first = ["value-0", "value-1", "value-2"] if campaign.paired.first.HasField("rappor") else ()
        res = association_to_proto(aggregator.estimate_association(cid, first_candidates=first), cid)
        assert res.SerializeToString(deterministic=True).hex() == pinned["association"]
    else:
        est = estimate_to_proto(aggregator.estimate(cid))
        assert est.SerializeToString(deterministic=True).hex() == pinned["estimate"]
