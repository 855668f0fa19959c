"""A campaign export as a JSON document: parameters, accumulator arrays and estimates.

``ldp-aggregator campaign export ID --json`` writes :func:`export_to_dict` of an
``ExportCampaignResponse`` (from a server, or from a database file with ``--db``)::

    {
      "format": "ldp-export/1",
      "exported_unix_ms": 1795000000000,
      "campaign": {...campaign_to_dict: as `ldp-aggregator campaign show ID --json`...},
      "n_reports": 40000, "n_batches": 4,
      "accumulator": {
        "type": "BitCountAccumulator", "n": 40000,
        "arrays": {"cohort_reports": {"shape": [64], "data": [...]},
                   "ones": {"shape": [64, 128], "data": [[...], ...]}},
        "bytes_base64": "TERQQQ..."      # exact serialization (accumulator_from_bytes reads it back)
      },
      "estimate": {...as `ldp-aggregator estimate --json`...}
    }

Non-finite numbers (``epsilon_inf`` of mechanisms without a longitudinal bound) are the string ``"inf"``, as
in every JSON document of the command lines (:mod:`ldp_aggregator.cli_common`).

The arrays are the accumulator's sufficient statistics (counts per value; per-cohort report and bit
counts), enough to recompute every estimate offline; the base64 bytes are the same data, checksummed.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np
from google.protobuf.json_format import MessageToDict

from ldp_aggregator._proto.ldp.v1 import analyst_pb2
from ldp_aggregator.accumulators import accumulator_from_bytes
from ldp_aggregator.analysis import estimate_to_dict
from ldp_client._proto.ldp.v1 import campaign_pb2

__all__ = ["EXPORT_FORMAT", "accumulator_to_dict", "campaign_to_dict", "export_to_dict"]

EXPORT_FORMAT = "ldp-export/1"


def _json_value(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"shape": list(value.shape), "data": _json_value(value.tolist())}
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, np.generic):
        return _json_value(value.item())
    return value


def accumulator_to_dict(acc: object) -> dict[str, Any]:
    """The accumulator's type, n and every array attribute (shape and nested lists)."""
    names: list[str] = []
    for klass in type(acc).__mro__:
        for name in getattr(klass, "__slots__", ()):
            if name not in names:
                names.append(name)
    names.extend(k for k in getattr(acc, "__dict__", {}) if k not in names and not k.startswith("_"))
    arrays = {name: _json_value(getattr(acc, name)) for name in names if hasattr(acc, name)}
    return {"type": type(acc).__name__, "n": int(getattr(acc, "n", 0)), "arrays": arrays}


def campaign_to_dict(msg: campaign_pb2.Campaign) -> dict[str, Any]:
    """A ``Campaign`` message as JSON: its proto fields (proto names), every scalar field present.

    ``mechanism`` names the parameter field that is set (``grr``, ``rappor``, ...), whose sub-object holds the
    parameters as on the wire (probabilities as 32-bit thresholds); ``epsilon_inf`` is ``"inf"`` when
    there is no longitudinal bound; ``created_unix_ms`` is a number.
    """
    doc: dict[str, Any] = MessageToDict(msg, preserving_proto_field_name=True)
    doc.update(
        id=msg.id,
        mechanism=msg.WhichOneof("mechanism") or "",
        description=msg.description,
        epsilon=_json_value(msg.epsilon),
        epsilon_inf=_json_value(msg.epsilon_inf),
        created_unix_ms=msg.created_unix_ms,
        closed=msg.closed,
        candidates=list(msg.candidates),
    )
    return doc


def export_to_dict(msg: analyst_pb2.ExportCampaignResponse) -> dict[str, Any]:
    """A JSON-ready dict of an export (module docstring)."""
    acc = accumulator_from_bytes(msg.accumulator)
    acc_doc = accumulator_to_dict(acc)
    acc_doc["bytes_base64"] = base64.b64encode(msg.accumulator).decode("ascii")
    return {
        "format": EXPORT_FORMAT,
        "exported_unix_ms": msg.exported_unix_ms,
        "campaign": campaign_to_dict(msg.campaign),
        "n_reports": msg.n_reports,
        "n_batches": msg.n_batches,
        "accumulator": acc_doc,
        "estimate": estimate_to_dict(msg.estimate),
    }
