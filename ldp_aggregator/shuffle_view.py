"""Issue 17: the central guarantee of a shuffled campaign, shown next to every estimate.

One place computes it and gives its three forms, so ``GetEstimate``, ``DecodeRappor`` and
``EstimateAssociation`` (over gRPC, from a database file, or from a Dask archive reduce) always carry the
same figures:

* :func:`campaign_shuffle`: a campaign's amplification (:func:`ldp_client.accounting.shuffle.amplify` of
  its ``Campaign.shuffler`` at eps0 = the campaign's per-report epsilon), or None without a shuffler;
* :func:`shuffle_to_proto`: it written into a ``ShuffleAmplification`` message field
  (``EstimateResponse.shuffle``, ``DecodeRapporResponse.shuffle``, ``AssociationResponse.shuffle``);
* :func:`shuffle_to_dict` and :func:`shuffle_text`: that field as JSON and as the line the CLI tables end
  with.

The bounds are Feldman, McMillan and Talwar, "Hiding Among the Clones", FOCS 2021 (Theorem 3.1 and the
numerical bound of their section 5); ``docs/privacy-accounting.md`` has the formulas.
"""

from __future__ import annotations

import math
from typing import Any

from ldp_aggregator._proto.ldp.v1 import estimates_pb2
from ldp_client.accounting.shuffle import ShuffleAmplification, amplify

__all__ = ["campaign_shuffle", "shuffle_text", "shuffle_to_dict", "shuffle_to_proto"]


def campaign_shuffle(info: Any) -> ShuffleAmplification | None:
    """The amplification of a campaign (a :class:`ldp_client.wire.CampaignInfo`) that declares a shuffler,
    at eps0 = its per-report ``params.epsilon``; None when it declares none (cached per question by
    :func:`amplify`)."""
    if info.shuffler is None:
        return None
    return amplify(info.shuffler, info.params.epsilon)


def shuffle_to_proto(sh: ShuffleAmplification | None, field: estimates_pb2.ShuffleAmplification) -> None:
    """Write ``sh`` into a message's ``shuffle`` field (left unset when ``sh`` is None)."""
    if sh is None:
        return
    field.batch_reports = sh.batch_reports
    field.delta = sh.delta
    field.closed_form_applies = sh.closed_form_applies
    field.epsilon_closed_form = sh.epsilon_closed_form
    field.epsilon_numerical = sh.epsilon_numerical


def _number(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)  # strict JSON has no inf/nan


def shuffle_to_dict(msg: Any) -> dict[str, Any] | None:
    """The ``shuffle`` field of a response message as a JSON-ready dict, or None when it is unset."""
    if not msg.HasField("shuffle"):
        return None
    sh = msg.shuffle
    return {
        "batch_reports": sh.batch_reports,
        "delta": sh.delta,
        "closed_form_applies": sh.closed_form_applies,
        "epsilon_closed_form": _number(sh.epsilon_closed_form),
        "epsilon_numerical": _number(sh.epsilon_numerical),
    }


def shuffle_text(msg: Any) -> str | None:
    """The ``shuffle`` field of a response message as one line, or None when it is unset."""
    if not msg.HasField("shuffle"):
        return None
    sh = msg.shuffle
    closed = f"{sh.epsilon_closed_form:.4g}" if sh.closed_form_applies else "n/a (its condition fails)"
    return (
        f"shuffled in batches of {sh.batch_reports:,}: central epsilon {sh.epsilon_numerical:.4g} "
        f"(numerical), {closed} (closed form), delta {sh.delta:.3g} (Feldman-McMillan-Talwar)"
    )
