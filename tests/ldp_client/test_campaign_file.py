"""ldp_client.campaign_file: the campaign definitions a device can pin (issue 13 item 10)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToDict

from ldp_client import wire
from ldp_client.campaign_file import load_campaign
from ldp_client.errors import InvalidParameterError
from ldp_client.params import GRRParams, RapporParams

GRR = GRRParams.from_epsilon(["chrome", "safari", "other"], 2.0)
RAPPOR = RapporParams(k=128, h=2, m=64)


def _msg(params: object, cid: str = "browser") -> object:
    return wire.campaign_to_proto(campaign_id=cid, params=params, candidates=("a.example",))  # type: ignore[arg-type]


def test_the_four_formats_give_the_same_campaign(tmp_path: Path) -> None:
    msg = _msg(GRR)
    (tmp_path / "c.pb").write_bytes(msg.SerializeToString())  # type: ignore[attr-defined]
    doc = MessageToDict(msg, preserving_proto_field_name=True)  # type: ignore[arg-type]
    (tmp_path / "c.json").write_text(json.dumps(doc), encoding="utf-8")
    (tmp_path / "export.json").write_text(
        json.dumps({"format": "ldp-export/1", "campaign": doc}), encoding="utf-8"
    )
    # The TOML of `ldp-aggregator campaign create browser --from-file`: the same make_params as the CLI.
    (tmp_path / "c.toml").write_text(
        'mechanism = "grr"\nepsilon = 2\ndomain = ["chrome", "safari", "other"]\n'
        'candidates = ["a.example"]\n',
        encoding="utf-8",
    )
    names = ("c.pb", "c.json", "export.json", "c.toml")
    infos = [load_campaign(tmp_path / name, campaign_id="browser") for name in names]
    for info in infos:
        assert info.campaign_id == "browser" and info.params == GRR and info.candidates == ("a.example",)


def test_toml_with_rappor_params_and_its_own_id(tmp_path: Path) -> None:
    path = tmp_path / "home.toml"
    path.write_text('id = "home"\nmechanism = "rappor"\n[params]\nk = 128\nh = 2\nm = 64\n', encoding="utf-8")
    info = load_campaign(path)
    assert info.campaign_id == "home" and info.params == RAPPOR


@pytest.mark.parametrize(
    ("content", "cid", "needle"),
    [
        (b"", "c", "neither JSON, TOML"),
        (b"{not json", "c", "invalid JSON"),
        (b"[1, 2]", "c", "as TOML"),
        (b'{"id": "x", "grr": {"domain": {"size": 1}}}', "c", "grr.domain.size=1 is invalid"),
        (b'{"id": "x", "grr": {"domain": "nope"}}', "c", "grr.domain.size=0 is invalid"),
        (b'mechanism = "grr"\nepsilon = 2\n', "c", "domain=None is invalid"),  # grr needs a domain
        (b'mechanism = "rappor"\n[params]\nf = 0\n', "c", "allow_f_zero=True"),
        (b'mechanism = "rr"\nepsilon = 1\n', None, "no 'id' and no campaign_id"),
        (b"\xff\xfe\x00garbage", "c", "neither JSON, TOML"),
    ],
)
def test_bad_files_get_one_clear_error(tmp_path: Path, content: bytes, cid: str | None, needle: str) -> None:
    path = tmp_path / "bad"
    path.write_bytes(content)
    with pytest.raises(InvalidParameterError) as info:
        load_campaign(path, campaign_id=cid)
    text = str(info.value)
    assert needle in text, text
    assert str(path) in text and "\n" not in text


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="No such file"):
        load_campaign(tmp_path / "missing.json")
