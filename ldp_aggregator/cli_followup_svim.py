"""``ldp-aggregator campaign follow-up ITEMS NEW --mechanism svim``: SVIM's itemsets stage in one command.

Reads the items campaign (an svim campaign of stage ``items``) and its estimate from the server, builds the
candidate itemsets from its top items (:func:`ldp_aggregator.itemsets.follow_up_params`: the ``--top`` best
items, default 10, every subset of size 2..``max_size`` scored by the paper's guessed frequency, the
``n_candidates`` best, default 20) and creates the itemsets campaign: the same items and group key, the
slots after the items stage's, so that every device reports to exactly one of the two. ``--param`` takes
``n_candidates``, ``max_size``, ``max_items`` (L' of the itemsets stage; default the items stage's L),
``size_share`` and ``inner`` (auto, grr, olh). ``--epsilon`` defaults to the items campaign's.
"""

from __future__ import annotations

from typing import Any, cast

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, estimates_pb2
from ldp_aggregator.cli_app import _fail, _print_campaign, _rpc, note
from ldp_aggregator.cli_common import param_error_text
from ldp_aggregator.itemsets import follow_up_params
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2
from ldp_client.errors import LdpError
from ldp_client.mechanisms.svim.core import ITEMS, SVIMParams

__all__ = ["svim_follow_up"]

_INT_FIELDS = ("n_candidates", "max_size", "max_items", "size_share")


def svim_follow_up(
    analyst: Any,
    source: str,
    campaign_id: str,
    *,
    epsilon: float | None,
    fields: dict[str, str],
    top: int | None,
    description: str,
    as_json: bool,
) -> None:
    """Create the itemsets stage of svim campaign ``source`` (module docstring); one-line errors."""
    found = _rpc(analyst.GetCampaign, collector_pb2.GetCampaignRequest(campaign_id=source))
    info = wire.campaign_from_proto(found)
    items = info.params
    if not isinstance(items, SVIMParams) or items.stage != ITEMS:
        member = found.WhichOneof("mechanism") or "mechanism-less"
        what = (
            f"an svim campaign of stage {items.stage}"
            if isinstance(items, SVIMParams)
            else f"a {member} campaign"
        )
        raise _fail(
            f"campaign {source!r} is {what}; --mechanism svim follows an svim campaign of stage items"
        )
    options: dict[str, Any] = {}
    for name, value in fields.items():
        if name in _INT_FIELDS:
            try:
                options[name] = int(value)
            except ValueError:
                raise _fail(f"--param {name}={value!r}: allowed an integer") from None
        elif name == "inner":
            options[name] = value
        else:
            raise _fail(f"--param {name}: allowed {', '.join(_INT_FIELDS)}, inner (for an svim follow-up)")
    estimate = _rpc(analyst.GetEstimate, estimates_pb2.EstimateRequest(campaign_id=source))
    if not estimate.items or estimate.n_reports == 0:
        raise _fail(f"campaign {source!r} has no reports yet; wait for its items stage to report")
    counts = [it.count for it in estimate.items]
    try:
        params = follow_up_params(
            items,
            counts,
            source_id=source,
            epsilon=epsilon if epsilon is not None else items.epsilon,
            top_items=top if top is not None else 10,
            **options,
        )
        text = description or f"svim itemsets stage of {source} ({len(params.candidates)} candidate itemsets)"
        msg = wire.campaign_to_proto(campaign_id=campaign_id, params=cast(Any, params), description=text)
    except LdpError as exc:
        raise _fail(param_error_text(exc)) from None
    created = _rpc(analyst.CreateCampaign, analyst_pb2.CreateCampaignRequest(campaign=msg))
    labels = params.labels()
    note.print(
        f"campaign {campaign_id} estimates {len(labels)} candidate itemsets of the top items of {source}"
        f" ({', '.join(labels[:5])}{', ...' if len(labels) > 5 else ''}); its devices are the slots"
        f" [{params.stage_lo}, {params.stage_hi}) of group key {params.group_key!r}",
        markup=False,
    )
    _print_campaign(created, as_json=as_json)
