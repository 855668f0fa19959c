"""Read a campaign's definition from a file, so that a device can pin its parameters (no numpy).

A :class:`~ldp_client.reporter.Reporter` given a pinned campaign encodes every value at once with those
parameters and journals it encoded, instead of holding raw values in memory until the server has been
reached; the server's campaign is still fetched, and a mismatch stops the reporter (see its docs).

Accepted formats (detected from the content, not the file name):

* **protobuf**: the binary ``ldp.v1.Campaign`` message (what ``GetCampaign`` returns; also the reporter's
  own cache ``<state_dir>/outbox/<id hash>/campaign.pb``);
* **JSON**: the ``Campaign`` message in protobuf's JSON mapping (``{"id": ..., "grr": {...}}``), or an
  export document of ``ldp-aggregator campaign export ID --json`` (its ``"campaign"`` member);
* **TOML**: the campaign file of ``ldp-aggregator campaign create ID --from-file campaign.toml``
  (``mechanism``, ``epsilon``, ``domain``, ``[params]``, ``candidates``, ``description``; an optional ``id``),
  turned into parameters by :func:`ldp_client.params.make_params`, the same code the command line uses.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError

from ldp_client import wire
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.errors import InvalidParameterError, LdpError
from ldp_client.params import make_params

__all__ = ["load_campaign"]

_MAX_FILE_BYTES = 64 << 20  # a campaign with a large candidate list is a few MB; refuse anything absurd


def _bad(path: Path, why: str) -> InvalidParameterError:
    return InvalidParameterError(
        "campaign", str(path), f"a readable campaign file (protobuf, JSON or TOML): {why}"
    )


def _from_json(doc: Any, path: Path) -> wire.CampaignInfo:
    if isinstance(doc, dict) and isinstance(doc.get("campaign"), dict):
        doc = doc["campaign"]  # an export document of `ldp-aggregator campaign export --json`
    if not isinstance(doc, dict):
        raise _bad(path, "the JSON is not an object")
    msg = campaign_pb2.Campaign()
    try:
        json_format.ParseDict(doc, msg, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise _bad(path, f"not a Campaign message ({exc})") from None
    return wire.campaign_from_proto(msg)


def _from_toml(spec: dict[str, Any], path: Path, campaign_id: str | None) -> wire.CampaignInfo:
    cid = spec.get("id", campaign_id)
    if not isinstance(cid, str):
        raise _bad(path, "the TOML has no 'id' and no campaign_id was given")
    mechanism = spec.get("mechanism")
    if not isinstance(mechanism, str):
        raise _bad(path, "the TOML has no 'mechanism'")
    fields = spec.get("params", {})
    if not isinstance(fields, dict):
        raise _bad(path, "'params' is not a table")
    params = make_params(
        mechanism, epsilon=spec.get("epsilon"), domain=spec.get("domain"), fields=dict(fields)
    )
    return wire.CampaignInfo(
        campaign_id=cid,
        params=params,
        description=str(spec.get("description", "")),
        candidates=tuple(spec.get("candidates", ())),
    )


def load_campaign(path: str | os.PathLike[str], *, campaign_id: str | None = None) -> wire.CampaignInfo:
    """The campaign defined in the file at ``path`` (formats in the module docstring).

    Args:
        path: the file.
        campaign_id: the id of a TOML definition that has no ``id`` (the command line takes the id as an
            argument); ignored for the other formats, which carry their id.

    Raises:
        InvalidParameterError: the file cannot be read, has none of the formats, or defines invalid
            parameters (the message names the file and the problem).
    """
    file = Path(path)
    try:
        with file.open("rb") as fh:
            data = fh.read(_MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise _bad(file, exc.strerror or str(exc)) from None
    if len(data) > _MAX_FILE_BYTES:
        raise _bad(file, f"larger than {_MAX_FILE_BYTES} bytes")
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    try:
        if text is not None and text.lstrip().startswith("{"):
            try:
                doc = json.loads(text)
            except json.JSONDecodeError as exc:
                raise _bad(file, f"invalid JSON ({exc})") from None
            return _from_json(doc, file)
        toml_error = ""
        if text is not None:
            try:
                spec: dict[str, Any] | None = tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                spec, toml_error = None, f" (as TOML: {exc})"
            if spec is not None and "mechanism" in spec:
                return _from_toml(spec, file, campaign_id)
        # A serialized Campaign can also be valid UTF-8, so the protobuf reading is tried last.
        try:
            msg: campaign_pb2.Campaign | None = campaign_pb2.Campaign.FromString(data)
        except DecodeError:
            msg = None
        if msg is None or msg.WhichOneof("mechanism") is None:
            raise _bad(file, "neither JSON, TOML with a 'mechanism', nor a Campaign message" + toml_error)
        return wire.campaign_from_proto(msg)
    except InvalidParameterError as exc:
        if exc.field == "campaign":
            raise
        raise InvalidParameterError(
            f"campaign file {str(file)!r}: {exc.field}", exc.value, exc.allowed
        ) from exc
    except LdpError as exc:  # pragma: no cover - every parameter error is an InvalidParameterError
        raise _bad(file, str(exc)) from exc
