"""A database written by an earlier release opens with the current code and answers exactly the same.

``tests/fixtures/release.sqlite3`` and ``release_answers.json`` were written by
``tests/fixtures/make_db_fixture.py`` on the release the answers file names: a campaign per mechanism
with reports, and the serialized EstimateResponse / DecodeRapporResponse / AssociationResponse that release
gave. The current code must migrate the file if needed and give the same answers: every field identical,
except that a floating-point number may differ from the pinned one by a relative 1e-7. The release's own
bytes are not reproducible bit for bit across numpy / scipy / BLAS builds: a newer scipy changed the last
bits of RAPPOR's least-squares solve and, through the association's EM (which stops once an iteration gains
less than its tolerance), its cells by about 1e-9, with the same code. A change in an estimator shows up
far above that tolerance.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import Message

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


# Relative tolerance for doubles: library builds' last-bit differences, amplified by EM's stopping rule to
# about 1e-9; far below any real change of an estimator.
_REL = 1e-7
# Absolute tolerance: a count or probability of about 1e-9 where the truth is 0 (EM's cells) is 0.
_ABS = 1e-6


def _same(current: Any, pinned: Any, where: str) -> None:
    """Fields of two messages equal, doubles to ``_REL`` (and non-finite ones exactly)."""
    if isinstance(current, Message):
        assert type(current) is type(pinned), where
        names = {f.name for f, _ in current.ListFields()} | {f.name for f, _ in pinned.ListFields()}
        for name in sorted(names):
            _same(getattr(current, name), getattr(pinned, name), f"{where}.{name}")
    elif isinstance(current, float):
        assert isinstance(pinned, float), where
        if math.isfinite(current) and math.isfinite(pinned):
            assert current == pytest.approx(pinned, rel=_REL, abs=_ABS), where
        else:
            assert str(current) == str(pinned), where
    elif hasattr(current, "__len__") and not isinstance(current, str | bytes):
        assert len(current) == len(pinned), where
        for i, (a, b) in enumerate(zip(current, pinned, strict=True)):
            _same(a, b, f"{where}[{i}]")
    else:
        assert current == pinned, where


def _check(current: Message, pinned_hex: str) -> None:
    pinned = type(current).FromString(bytes.fromhex(pinned_hex))
    _same(current, pinned, type(current).__name__)


def test_every_campaign_is_there(aggregator: Aggregator) -> None:
    listed = {c.id for c in aggregator.list_campaigns()}
    assert listed == set(ANSWERS["campaigns"])


@pytest.mark.parametrize("cid", sorted(ANSWERS["campaigns"]))
def test_answers_are_unchanged(aggregator: Aggregator, cid: str) -> None:
    pinned = ANSWERS["campaigns"][cid]
    if "decode" in pinned:
        cands = [f"value-{i}" for i in range(8)]
        est = estimate_to_proto(aggregator.estimate(cid, candidates=cands))
        _check(est, pinned["estimate"])
        dec = decode_to_proto(aggregator.decode_rappor(cid, candidates=cands), cid)
        _check(dec, pinned["decode"])
    elif "association" in pinned:
        campaign = aggregator.get_campaign(cid)
        first = ["value-0", "value-1", "value-2"] if campaign.paired.first.HasField("rappor") else ()
        res = association_to_proto(aggregator.estimate_association(cid, first_candidates=first), cid)
        _check(res, pinned["association"])
    else:
        _check(estimate_to_proto(aggregator.estimate(cid)), pinned["estimate"])
