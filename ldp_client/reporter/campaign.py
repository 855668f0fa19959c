"""Which parameters encode the values, and the campaign check (package docstring: "Which
parameters encode the values" and "Campaign check (the rule)").

:class:`Budget` is the app's privacy limit and refuses a campaign over it; :func:`load_pinned` and
:func:`load_cached` read the pinned and cached campaigns; :func:`encoder_for` is the per-report encoder of
a campaign's parameters (OS CSPRNG, no numpy).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from ldp_client import registry, wire
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.campaign_file import load_campaign
from ldp_client.errors import BudgetExceededError, InvalidParameterError
from ldp_client.mechanisms.pem import PEMParams
from ldp_client.mechanisms.pem.rounds import round_encoder
from ldp_client.params import MechanismParams
from ldp_client.secret import ClientSecret

# The reporter's logger: one name for the whole package, as apps configure it.
logger = logging.getLogger("ldp_client.reporter")


def is_rounds(params: MechanismParams) -> bool:
    """Whether the campaign collects in rounds (issue 16): its devices encode against the round state of
    the server's campaign, so neither a pinned nor a cached copy may encode."""
    return isinstance(params, PEMParams) and params.adaptive


def encoder_for(
    params: MechanismParams,
    *,
    campaign_id: str,
    secret: ClientSecret | Callable[[], ClientSecret] | None = None,
    info: wire.CampaignInfo | None = None,
) -> Callable[[Any], Any]:
    """The per-report ``encode`` (OS CSPRNG, no numpy) of a campaign's parameters.

    Args:
        params: the campaign's parameters.
        campaign_id: the campaign (RAPPOR variants derive the permanent response from it).
        secret: the client secret of the RAPPOR variants, or a function returning it (called only for
            them, so an rr/grr app never creates a secret file).
        info: the server's campaign, for a campaign in rounds (:func:`is_rounds`): the round collecting
            and the published candidates.

    Raises:
        InvalidParameterError: a RAPPOR variant without a secret, parameters of no known mechanism, or a
            campaign in rounds without the server's campaign.
        RoundNotOpenError: a campaign in rounds whose round collecting now is not this device's.
    """
    if is_rounds(params):
        assert isinstance(params, PEMParams)
        if info is None or info.params != params:
            raise InvalidParameterError(
                "campaign", campaign_id, "the server's campaign (its round state decides the encoding)"
            )
        if secret is None:
            raise InvalidParameterError(
                "secret", None, f"a ClientSecret (the {params.name} mechanism needs one)"
            )
        return round_encoder(
            params,
            campaign_id=campaign_id,
            secret=secret() if callable(secret) else secret,
            current=info.discovery_round,
            published=[r.kept for r in info.discovery_rounds],
        )
    spec = registry.find(params)
    if spec is None:
        raise InvalidParameterError("campaign mechanism", type(params).__name__, "a mechanism of ldp_client")
    if secret is None and spec.needs_secret(params):
        raise InvalidParameterError("secret", None, f"a ClientSecret (the {params.name} mechanism needs one)")
    return spec.encoder(params, campaign_id=campaign_id, secret=secret)


@dataclass(frozen=True, slots=True)
class Budget:
    """The app's limit on a campaign's privacy cost: per report, and optionally over repeated reports."""

    campaign_id: str
    max_epsilon: float
    max_epsilon_inf: float | None

    def refusal(self, params: MechanismParams) -> BudgetExceededError | None:
        """The error refusing ``params`` (epsilon recomputed from them, never the server's), or None."""
        eps = params.epsilon
        if not eps <= self.max_epsilon:
            return BudgetExceededError(
                f"campaign_id={self.campaign_id!r} asks epsilon={eps!r} per report ({params.name}): "
                f"allowed at most max_epsilon={self.max_epsilon!r}; the reporter refuses it"
            )
        eps_inf = wire.epsilon_inf(params)
        if self.max_epsilon_inf is not None and not eps_inf <= self.max_epsilon_inf:
            return BudgetExceededError(
                f"campaign_id={self.campaign_id!r} has longitudinal epsilon_inf={eps_inf!r} "
                f"({params.name}; +inf means no bound over repeated reports): allowed at most "
                f"max_epsilon_inf={self.max_epsilon_inf!r}; the reporter refuses it"
            )
        return None


def load_pinned(campaign: object, budget: Budget) -> wire.CampaignInfo:
    """The app's pinned campaign (a CampaignInfo or a campaign file), checked against ``budget``.

    Raises:
        InvalidParameterError: not a campaign, an unreadable file, or another campaign's.
        BudgetExceededError: the campaign costs more than ``budget`` allows.
    """
    campaign_id = budget.campaign_id
    if isinstance(campaign, wire.CampaignInfo):
        info = campaign
    elif isinstance(campaign, str | os.PathLike):
        info = load_campaign(campaign, campaign_id=campaign_id)
    else:
        raise InvalidParameterError(
            "campaign", type(campaign).__name__, "a CampaignInfo, the path of a campaign file, or None"
        )
    if info.campaign_id != campaign_id:
        raise InvalidParameterError(
            "campaign",
            info.campaign_id,
            f"the campaign {campaign_id!r} (the reporter's campaign_id)",
        )
    refusal = budget.refusal(info.params)
    if refusal is not None:
        raise refusal
    return info


def load_cached(path: Path, budget: Budget) -> wire.CampaignInfo | None:
    """The cached campaign, if present, readable, open and within budget (otherwise None, logged)."""
    campaign_id = budget.campaign_id
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("ldp reporter %r: cannot read the cached campaign (%s)", campaign_id, exc)
        return None
    try:
        info = wire.campaign_from_proto(campaign_pb2.Campaign.FromString(data))
    except (DecodeError, InvalidParameterError) as exc:
        logger.warning("ldp reporter %r: ignored an unreadable cached campaign (%s)", campaign_id, exc)
        return None
    if (
        info.campaign_id != campaign_id
        or info.closed
        or budget.refusal(info.params)
        or is_rounds(info.params)
    ):
        return None  # the server's answer decides, as without a cache (rounds: always)
    return info
