"""The parameter classes of every mechanism, re-exported from their modules, and ``make_params``.

Each mechanism defines its frozen, validated parameter dataclass in its module under
``ldp_client/mechanisms/`` (registered in :mod:`ldp_client.registry`): exact probabilities (multiples of
2**-32, see :mod:`ldp_client._prob`) from which the thresholds the encoders sample with and the epsilon they
guarantee are derived. ``from_epsilon`` constructors round toward privacy: the effective epsilon never
exceeds the requested one, and a :class:`~ldp_client.errors.PrivacyQuantizationWarning` says so when the
difference is material. :func:`make_params` builds any of them by name through the registry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ldp_client import registry
from ldp_client.auto import make_auto_params
from ldp_client.domain import MAX_DOMAIN_SIZE, Domain
from ldp_client.mechanisms.grr import GRRParams
from ldp_client.mechanisms.hr import HadamardParams
from ldp_client.mechanisms.numeric.duchi import DuchiParams
from ldp_client.mechanisms.numeric.laplace import LaplaceParams
from ldp_client.mechanisms.numeric.multidim import MultidimParams
from ldp_client.mechanisms.numeric.piecewise import HybridParams, PiecewiseParams
from ldp_client.mechanisms.numeric.sr import SRParams
from ldp_client.mechanisms.olh import BLHParams, OLHParams
from ldp_client.mechanisms.paired import PAIRED_SIDE_TYPES, PairedParams, PairedSide
from ldp_client.mechanisms.pem.core import PEMParams
from ldp_client.mechanisms.rappor.params import (
    MAX_COHORTS,
    MAX_RAPPOR_BITS,
    MAX_RAPPOR_HASHES,
    BasicRapporParams,
    BooleanRapporParams,
    RapporParams,
)
from ldp_client.mechanisms.rr import BinaryRRParams
from ldp_client.mechanisms.sets import (
    MAX_SET_ITEMS,
    InnerOracleParams,
    SetValuedParams,
    oracle_rates,
    oracle_report_bits,
)
from ldp_client.mechanisms.ss import SubsetSelectionParams
from ldp_client.mechanisms.ue import OUEParams, SUEParams

__all__ = [
    "AUTO_MECHANISM",
    "FREQUENCY_ORACLE_TYPES",
    "MAX_COHORTS",
    "MAX_DOMAIN_SIZE",
    "MAX_RAPPOR_BITS",
    "MAX_RAPPOR_HASHES",
    "MAX_SET_ITEMS",
    "MECHANISM_NAMES",
    "PAIRED_SIDE_TYPES",
    "BLHParams",
    "BasicRapporParams",
    "BinaryRRParams",
    "BooleanRapporParams",
    "Domain",
    "DuchiParams",
    "FrequencyOracleParams",
    "GRRParams",
    "HadamardParams",
    "HybridParams",
    "InnerOracleParams",
    "LaplaceParams",
    "MechanismParams",
    "MultidimParams",
    "OLHParams",
    "OUEParams",
    "PEMParams",
    "PairedParams",
    "PairedSide",
    "PiecewiseParams",
    "RapporParams",
    "SRParams",
    "SUEParams",
    "SetValuedParams",
    "SubsetSelectionParams",
    "make_params",
    "oracle_rates",
    "oracle_report_bits",
]

# -------------------------------------------------------------------------------------------------------
# Frequency oracles of issue 6: unary encoding (oue, sue), local hashing (olh, blh), subset selection
# (ss), Hadamard response (hr) and the set-valued wrapper (Wang, Blocki, Li, Jha, "Locally Differentially
# Private Protocols for Frequency Estimation", USENIX Security 2017). Each is defined with its encoder and
# spec in ldp_client/mechanisms/{ue,olh,ss,hr,sets}.py (registered in ldp_client.registry); re-exported here.

FrequencyOracleParams = (
    OUEParams | SUEParams | OLHParams | BLHParams | SubsetSelectionParams | HadamardParams | SetValuedParams
)
FREQUENCY_ORACLE_TYPES = (
    OUEParams,
    SUEParams,
    OLHParams,
    SubsetSelectionParams,
    HadamardParams,
    SetValuedParams,
)
"""The issue-6 parameter classes (BLHParams is a subclass of OLHParams)."""


MechanismParams = (
    BinaryRRParams
    | GRRParams
    | RapporParams
    | BasicRapporParams
    | BooleanRapporParams
    | OUEParams
    | SUEParams
    | OLHParams
    | BLHParams
    | SubsetSelectionParams
    | HadamardParams
    | SetValuedParams
    | LaplaceParams
    | DuchiParams
    | PiecewiseParams
    | HybridParams
    | SRParams
    | MultidimParams
    | PairedParams
)
"""The parameter classes this facade re-exports (a typing aid). A mechanism added later by its own module
and one registry line is typed by its own parameter class; :data:`ldp_client.registry.SPECS` is the
complete list at run time, and every class here is in it."""
MechanismName = Literal[
    "rr",
    "grr",
    "rappor",
    "basic-rappor",
    "boolean-rappor",
    "oue",
    "sue",
    "olh",
    "blh",
    "ss",
    "hr",
    "set-valued",
    "laplace",
    "duchi",
    "piecewise",
    "hybrid",
    "sr",
    "multidim",
    "paired",
]
"""The names of :data:`MechanismParams`' mechanisms, in the registry's order (which lists any mechanism added
later after them)."""

AUTO_MECHANISM = "auto"
"""Not a mechanism: ``make_params("auto", ...)`` returns the lowest-variance frequency oracle
(:func:`ldp_client.auto.choose_mechanism`)."""
MECHANISM_NAMES: tuple[str, ...] = registry.names()
"""Every mechanism ``make_params`` builds, in the order they are listed to users (the registry's: that of
:data:`MechanismName`, then any registered later)."""


def make_params(
    mechanism: str,
    *,
    epsilon: float | None = None,
    domain: int | Sequence[str] | Domain | None = None,
    fields: dict[str, object] | None = None,
) -> MechanismParams:
    """Build a mechanism's parameters by name, as the command lines and config files describe them.

    Args:
        mechanism: One of :data:`MECHANISM_NAMES` (``rr``, ``grr``, ``rappor``, ``basic-rappor``,
            ``boolean-rappor``, the issue-6 frequency oracles ``oue``, ``sue``, ``olh``, ``blh``, ``ss``,
            ``hr``, ``set-valued``, ...), or ``auto``: the lowest-variance frequency oracle for the domain
            at ``epsilon`` (optional field ``max_report_bits``; :func:`ldp_client.auto.choose_mechanism`).
        epsilon: For ``rr``, ``grr`` and the frequency oracles: build with ``from_epsilon`` (the oracles'
            free parameter, g for olh or k for ss, optimal unless given). RAPPOR variants are set by f, p, q.
        domain: Size or labels; required by ``grr``, ``basic-rappor`` and the frequency oracles.
        fields: Any init field of the parameter dataclass by name (e.g. ``k``, ``h``, ``m``, ``f``, ``p``,
            ``q``, ``truth_probability``); string values are converted to the field's type.

    Raises:
        InvalidParameterError: unknown mechanism or field, a value of the wrong type, or a combination
            the mechanism does not take (the message names it and lists what is allowed).
    """
    if mechanism == AUTO_MECHANISM:  # issue 6: resolved here to the concrete parameters
        return make_auto_params(epsilon=epsilon, domain=domain, fields=dict(fields or {}))  # type: ignore[no-any-return]
    # A registered mechanism builds its own parameters (ldp_client.registry); an unknown name is refused
    # with the list of names.
    spec = registry.spec_named(mechanism)
    return spec.make(epsilon=epsilon, domain=domain, fields=dict(fields or {}))  # type: ignore[no-any-return]
