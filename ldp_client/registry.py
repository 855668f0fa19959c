"""The registered mechanisms: one line per mechanism, and the lookups every layer uses.

A mechanism is registered by importing its module's ``SPEC`` (:mod:`ldp_client.spec`) here and adding it to
:data:`SPECS` (import the module itself, ``ldp_client.mechanisms.NAME``, never the package); the
parameter facade (:func:`ldp_client.params.make_params`), the wire codec, the reporter, the aggregator's
accumulators and estimators and the simulator then find it here, by parameters (:func:`spec_for`), by name
(:func:`spec_named`) or by the ``Campaign.mechanism`` oneof member (:func:`spec_for_member`).

Imports flow one way: this module imports the mechanism modules, and a mechanism module never imports this
one (nor :mod:`ldp_client.params`, which imports this one). Importing it does not import numpy.
"""

from __future__ import annotations

from typing import Any, Final

from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.calm import SPEC as CALM_SPEC
from ldp_client.mechanisms.grr import SPEC as GRR_SPEC
from ldp_client.mechanisms.haar import SPEC as HAAR_SPEC
from ldp_client.mechanisms.hio import SPEC as HIO_SPEC
from ldp_client.mechanisms.hr import SPEC as HR_SPEC
from ldp_client.mechanisms.longitudinal.dbitflip import SPEC as DBITFLIP_SPEC
from ldp_client.mechanisms.longitudinal.lgrr import SPEC as LGRR_SPEC
from ldp_client.mechanisms.longitudinal.losue import SPEC as LOSUE_SPEC
from ldp_client.mechanisms.longitudinal.onebitmean import SPEC as ONEBITMEAN_SPEC
from ldp_client.mechanisms.numeric.duchi import SPEC as DUCHI_SPEC
from ldp_client.mechanisms.numeric.gaussian.mechanism import SPEC as GAUSSIAN_SPEC
from ldp_client.mechanisms.numeric.gaussian.vector import VECTOR_SPEC as GAUSSIAN_VECTOR_SPEC
from ldp_client.mechanisms.numeric.laplace import SPEC as LAPLACE_SPEC
from ldp_client.mechanisms.numeric.multidim import SPEC as MULTIDIM_SPEC
from ldp_client.mechanisms.numeric.piecewise import HYBRID_SPEC, PIECEWISE_SPEC
from ldp_client.mechanisms.numeric.sr import SPEC as SR_SPEC
from ldp_client.mechanisms.olh import BLH_SPEC, OLH_SPEC
from ldp_client.mechanisms.paired import SPEC as PAIRED_SPEC
from ldp_client.mechanisms.pckv import SPEC as PCKV_SPEC
from ldp_client.mechanisms.pem.spec import SPEC as PEM_SPEC
from ldp_client.mechanisms.rappor.spec import BASIC_SPEC as BASIC_RAPPOR_SPEC
from ldp_client.mechanisms.rappor.spec import BOOLEAN_SPEC as BOOLEAN_RAPPOR_SPEC
from ldp_client.mechanisms.rappor.spec import RAPPOR_SPEC
from ldp_client.mechanisms.rr import SPEC as RR_SPEC
from ldp_client.mechanisms.sets import SPEC as SET_VALUED_SPEC
from ldp_client.mechanisms.sketch import SPECS as SKETCH_SPECS
from ldp_client.mechanisms.ss import SPEC as SS_SPEC
from ldp_client.mechanisms.svim.spec import SPEC as SVIM_SPEC
from ldp_client.mechanisms.treehist.spec import SPEC as TREEHIST_SPEC
from ldp_client.mechanisms.ue import OUE_SPEC, SUE_SPEC
from ldp_client.spec import MechanismSpec

__all__ = [
    "SPECS",
    "find",
    "find_member",
    "find_named",
    "names",
    "spec_for",
    "spec_for_member",
    "spec_named",
]

AnySpec = MechanismSpec[Any]

SPECS: Final[tuple[AnySpec, ...]] = (
    RR_SPEC,
    GRR_SPEC,
    RAPPOR_SPEC,
    BASIC_RAPPOR_SPEC,
    BOOLEAN_RAPPOR_SPEC,
    OUE_SPEC,
    SUE_SPEC,
    OLH_SPEC,
    BLH_SPEC,
    SS_SPEC,
    HR_SPEC,
    SET_VALUED_SPEC,
    LAPLACE_SPEC,
    DUCHI_SPEC,
    PIECEWISE_SPEC,
    HYBRID_SPEC,
    SR_SPEC,
    MULTIDIM_SPEC,
    PAIRED_SPEC,  # it composes side specs (ldp_client.mechanisms.paired.SIDE_SPECS)
    *SKETCH_SPECS,
    PEM_SPEC,
    DBITFLIP_SPEC,
    ONEBITMEAN_SPEC,
    LGRR_SPEC,
    LOSUE_SPEC,
    GAUSSIAN_SPEC,
    GAUSSIAN_VECTOR_SPEC,
    TREEHIST_SPEC,
    HIO_SPEC,  # range queries (issue 18)
    HAAR_SPEC,  # range queries (issue 18)
    PCKV_SPEC,  # key-value data (issue 18)
    SVIM_SPEC,  # set-valued item and itemset mining (issue 18)
    CALM_SPEC,  # multi-attribute marginals (issue 18)
)
"""Every registered mechanism, in the order names are listed to users (that of the ``Campaign.mechanism``
oneof)."""

_BY_NAME: Final[dict[str, AnySpec]] = {s.name: s for s in SPECS}
# Exact types: a subclass of a parameter class (BLHParams of OLHParams) is its own mechanism.
_BY_TYPE: Final[dict[type, AnySpec]] = {s.params_type: s for s in SPECS}
_BY_MEMBER: Final[dict[str, AnySpec]] = {s.wire.campaign: s for s in SPECS}


def _check_unique() -> None:
    """Two specs may not share a name, a parameter class or a oneof member (a registry bug, at import)."""
    for what, table in (("name", _BY_NAME), ("parameter class", _BY_TYPE), ("campaign member", _BY_MEMBER)):
        if len(table) != len(SPECS):
            raise RuntimeError(f"ldp_client.registry: two registered mechanisms share a {what}")


_check_unique()


def names() -> tuple[str, ...]:
    """The registered mechanisms' names, in :data:`SPECS` order."""
    return tuple(_BY_NAME)


def find(params: object) -> AnySpec | None:
    """The spec of ``params``' exact type, or None when its mechanism is not registered."""
    return _BY_TYPE.get(type(params))


def find_named(name: object) -> AnySpec | None:
    """The spec named ``name``, or None when no registered mechanism has that name."""
    return _BY_NAME.get(name) if isinstance(name, str) else None


def find_member(member: object) -> AnySpec | None:
    """The spec whose ``Campaign.mechanism`` member is ``member``, or None."""
    return _BY_MEMBER.get(member) if isinstance(member, str) else None


def spec_for(params: object) -> AnySpec:
    """The spec of a parameter object.

    Raises:
        InvalidParameterError: ``params`` is not the parameters of a registered mechanism.
    """
    spec = find(params)
    if spec is None:
        allowed = f"the parameters of a registered mechanism ({', '.join(names())})"
        raise InvalidParameterError("params", type(params).__name__, allowed)
    return spec


def spec_named(name: object) -> AnySpec:
    """The spec of the mechanism called ``name``.

    Raises:
        InvalidParameterError: no registered mechanism has that name (the message lists them).
    """
    spec = find_named(name)
    if spec is None:
        raise InvalidParameterError("mechanism", name, f"one of {', '.join(names())}")
    return spec


def spec_for_member(member: object) -> AnySpec:
    """The spec of a ``Campaign.mechanism`` oneof member (e.g. ``"grr"``).

    Raises:
        InvalidParameterError: no registered mechanism uses that member (the message lists them).
    """
    spec = find_member(member)
    if spec is None:
        allowed = ", ".join(s.wire.campaign for s in SPECS)
        raise InvalidParameterError("mechanism", member, f"one of {allowed}")
    return spec
