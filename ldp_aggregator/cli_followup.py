"""``ldp-aggregator campaign follow-up``: a frequency campaign over the values a discovery campaign found.

A discovery campaign (issue 16: pem, ...) answers *which* values are frequent, each counted by the few users
of the groups that tested it. Counting them precisely is then a second, ordinary campaign whose domain is
the discovered values; this command makes it in one step: it reads the discovery's current estimate from
the server, keeps its ranked values (``--top``), and creates the new campaign with them:

* a mechanism over a declared domain (grr, oue, olh, ..., or ``auto``) gets the values as its labels, plus
  one more label (``--other-label``, default ``(other)``) for the devices whose value is none of them, so
  that every device can answer (the app maps such values to that label);
* a mechanism whose devices hash any string (rappor, cms, hcms) gets them as its candidate strings.

Devices of the new campaign are different reports, so a device that answered the discovery spends its
epsilon again; its ledger (issue 17) counts both.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, estimates_pb2
from ldp_aggregator.cli_app import JsonOpt, ServerOpt, _analyst, _fail, _print_campaign, _rpc, note
from ldp_aggregator.cli_common import param_error_text
from ldp_aggregator.cli_followup_svim import svim_follow_up
from ldp_aggregator.server import DEFAULT_LISTEN
from ldp_client import registry, wire
from ldp_client._proto.ldp.v1 import collector_pb2
from ldp_client.errors import LdpError
from ldp_client.params import AUTO_MECHANISM, make_params
from ldp_client.spec import Kind

__all__ = ["DEFAULT_OTHER_LABEL", "campaign_follow_up", "follow_up_names"]

DEFAULT_OTHER_LABEL = "(other)"


def follow_up_names() -> tuple[str, ...]:
    """Mechanisms a follow-up campaign can use: those over a declared domain, those over candidates."""
    names = [s.name for s in registry.SPECS if s.takes_domain or s.estimates_candidates]
    return (AUTO_MECHANISM, *names)


def campaign_follow_up(
    source: Annotated[str, typer.Argument(help="The discovery campaign whose values to count.")],
    campaign_id: Annotated[str, typer.Argument(help="Id of the new campaign.")],
    mechanism: Annotated[
        str,
        typer.Option(
            help="Mechanism of the new campaign: one over a declared domain (grr, oue, olh, ..., auto: the "
            "values become its labels) or over candidate strings (rappor, cms, hcms: they become its "
            "candidates); svim after an svim items campaign: its itemsets stage (--top items combined).",
            show_default=False,
        ),
    ],
    epsilon: Annotated[
        float | None, typer.Option(help="Per-report epsilon of the new campaign.", show_default=False)
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(help="Mechanism field NAME=VALUE (repeatable), as campaign create.", show_default=False),
    ] = None,
    top: Annotated[
        int | None,
        typer.Option(help="Keep the first N discovered values (by estimated count).", show_default="all"),
    ] = None,
    other_label: Annotated[
        str,
        typer.Option(help="Domain mechanisms: the label of every value that was not discovered."),
    ] = DEFAULT_OTHER_LABEL,
    description: Annotated[str, typer.Option(help="Free text (default: says what it follows).")] = "",
    server: ServerOpt = DEFAULT_LISTEN,
    as_json: JsonOpt = False,
) -> None:
    """Create a frequency campaign over the values a discovery campaign found (one command)."""
    if top is not None and top < 1:
        raise _fail(f"--top={top}: allowed an integer >= 1")
    if mechanism == "svim":  # issue 18: SVIM's itemsets stage from its items stage
        raw = dict(item.partition("=")[::2] for item in param or [])
        svim_follow_up(
            _analyst(server), source, campaign_id, epsilon=epsilon, fields=raw, top=top,
            description=description, as_json=as_json,
        )  # fmt: skip
        return
    spec = None if mechanism == AUTO_MECHANISM else registry.find_named(mechanism)
    if mechanism != AUTO_MECHANISM and (spec is None or not (spec.takes_domain or spec.estimates_candidates)):
        raise _fail(
            f"--mechanism {mechanism!r}: a follow-up needs a mechanism over a domain or over candidate"
            f" strings, one of {', '.join(follow_up_names())}"
        )
    fields: dict[str, object] = {}
    for item in param or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise _fail(f"--param {item!r}: expected NAME=VALUE")
        fields[name.strip()] = value.strip()

    analyst = _analyst(server)
    found = _rpc(analyst.GetCampaign, collector_pb2.GetCampaignRequest(campaign_id=source))
    member = found.WhichOneof("mechanism") or ""
    source_spec = registry.find_member(member)
    if source_spec is None or source_spec.kind is not Kind.DISCOVERY:
        discovery = ", ".join(s.name for s in registry.SPECS if s.kind is Kind.DISCOVERY)
        raise _fail(
            f"campaign {source!r} is a {member or 'mechanism-less'} campaign, not a discovery campaign"
            f" ({discovery}); follow-up counts the values a discovery found"
        )
    estimate = _rpc(analyst.GetEstimate, estimates_pb2.EstimateRequest(campaign_id=source))
    values = [item.label for item in estimate.items][:top]
    if not values:
        raise _fail(
            f"campaign {source!r} has discovered no value yet ({estimate.n_reports} reports); wait for"
            " more reports, or run estimate to see its levels"
        )
    takes_candidates = spec is not None and spec.estimates_candidates
    if not takes_candidates and other_label in values:
        raise _fail(
            f"--other-label {other_label!r} is one of the discovered values; allowed a label that is not"
        )
    text = description or f"follow-up of discovery campaign {source} ({len(values)} values)"
    try:
        params: Any
        if takes_candidates:
            params = make_params(mechanism, epsilon=epsilon, domain=None, fields=fields)
            candidates = values
        else:
            domain = (*values, other_label)
            if mechanism == AUTO_MECHANISM:
                from ldp_client.auto import auto_choice

                choice = auto_choice(epsilon=epsilon, domain=domain, fields=fields)
                note.print(f"auto chose {choice.mechanism}: {choice.reason}", markup=False)
                params = choice.params
            else:
                params = make_params(mechanism, epsilon=epsilon, domain=domain, fields=fields)
            candidates = []
        msg = wire.campaign_to_proto(
            campaign_id=campaign_id, params=params, description=text, candidates=candidates
        )
    except LdpError as exc:
        raise _fail(param_error_text(exc)) from None
    created = _rpc(analyst.CreateCampaign, analyst_pb2.CreateCampaignRequest(campaign=msg))
    note.print(
        f"campaign {campaign_id} counts the {len(values)} values discovery campaign {source} found"
        + ("" if takes_candidates else f" (plus {other_label!r} for every other value)"),
        markup=False,
    )
    _print_campaign(created, as_json=as_json)
