"""The numeric family as a whole: its specs in order, the unions of its types, and the functions that take
any of its mechanisms (:func:`numeric_encoder`, :func:`exact_distribution`, :func:`make_numeric_params`),
each through the mechanism's own spec. Importing this module does not import numpy.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Final

from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.numeric.codec import OneDimSpec
from ldp_client.mechanisms.numeric.duchi import SPEC as DUCHI_SPEC
from ldp_client.mechanisms.numeric.duchi import DuchiEncoder, DuchiParams
from ldp_client.mechanisms.numeric.gaussian.mechanism import SPEC as GAUSSIAN_SPEC
from ldp_client.mechanisms.numeric.gaussian.mechanism import GaussianEncoder, GaussianParams
from ldp_client.mechanisms.numeric.laplace import SPEC as LAPLACE_SPEC
from ldp_client.mechanisms.numeric.laplace import LaplaceEncoder, LaplaceParams
from ldp_client.mechanisms.numeric.multidim import SPEC as MULTIDIM_SPEC
from ldp_client.mechanisms.numeric.multidim import MultidimEncoder, MultidimParams
from ldp_client.mechanisms.numeric.piecewise import (
    HYBRID_SPEC,
    PIECEWISE_SPEC,
    HybridEncoder,
    HybridParams,
    PiecewiseEncoder,
    PiecewiseParams,
)
from ldp_client.mechanisms.numeric.sr import SPEC as SR_SPEC
from ldp_client.mechanisms.numeric.sr import SREncoder, SRParams

__all__ = [
    "NUMERIC_MECHANISM_NAMES",
    "NUMERIC_PARAM_CLASSES",
    "NUMERIC_SPECS",
    "NumericEncoder",
    "NumericParams",
    "OneDimParams",
    "exact_distribution",
    "is_numeric",
    "make_numeric_params",
    "numeric_encoder",
]

OneDimParams = DuchiParams | SRParams | PiecewiseParams | HybridParams | LaplaceParams | GaussianParams
NumericParams = OneDimParams | MultidimParams
NumericEncoder = (
    DuchiEncoder | SREncoder | PiecewiseEncoder | HybridEncoder | LaplaceEncoder | GaussianEncoder
)

_ONE_DIM_SPECS: Final[tuple[OneDimSpec[Any], ...]] = (
    LAPLACE_SPEC,
    DUCHI_SPEC,
    PIECEWISE_SPEC,
    HYBRID_SPEC,
    SR_SPEC,
    GAUSSIAN_SPEC,
)
NUMERIC_SPECS: Final = (*_ONE_DIM_SPECS, MULTIDIM_SPEC)
"""The family's specs, in the order names are listed to users."""
NUMERIC_PARAM_CLASSES: Final = tuple(s.params_type for s in NUMERIC_SPECS)
NUMERIC_MECHANISM_NAMES: tuple[str, ...] = tuple(s.name for s in NUMERIC_SPECS)
_ONE_DIM_BY_TYPE: Final[dict[type, OneDimSpec[Any]]] = {s.params_type: s for s in _ONE_DIM_SPECS}
_BY_NAME: Final = {s.name: s for s in NUMERIC_SPECS}


def is_numeric(params: object) -> bool:
    """True for the parameters of a numeric (mean) mechanism."""
    return isinstance(params, NUMERIC_PARAM_CLASSES)


def numeric_encoder(params: NumericParams) -> NumericEncoder | MultidimEncoder:
    """The encoder of any numeric mechanism's parameters."""
    if type(params) is MultidimParams:
        return MULTIDIM_SPEC.new_encoder(params)
    spec = _ONE_DIM_BY_TYPE.get(type(params))
    if spec is None:
        raise InvalidParameterError("params", type(params).__name__, "parameters of a numeric mechanism")
    enc: NumericEncoder = spec.new_encoder(params)  # type: ignore[assignment]
    return enc


def exact_distribution(params: OneDimParams, s: float) -> dict[int, Fraction]:
    """P(code | position s) for every code with positive probability, exactly, from the parameters'
    integers and the encoders' arithmetic. For tests and small parameters (it lists every code: G of them
    for piecewise, K + 2R + 1 for laplace)."""
    spec = _ONE_DIM_BY_TYPE.get(type(params))
    if spec is None:
        raise InvalidParameterError("params", type(params).__name__, "one-dimensional numeric parameters")
    return spec.distribution(params, s)


def make_numeric_params(
    mechanism: str,
    *,
    epsilon: float | None = None,
    domain: object = None,
    fields: dict[str, object] | None = None,
) -> NumericParams:
    """Numeric parameters by name, as :func:`ldp_client.params.make_params` describes them (each
    mechanism's spec ``make``: :class:`~ldp_client.mechanisms.numeric.codec.OneDimSpec` for laplace, duchi,
    piecewise, hybrid and sr, :func:`~ldp_client.mechanisms.numeric.multidim.make_multidim`).

    Raises:
        InvalidParameterError: an unknown mechanism or field, missing lo/hi, a bad value (named by field).
    """
    spec = _BY_NAME.get(mechanism)
    if spec is None:
        raise InvalidParameterError("mechanism", mechanism, ", ".join(NUMERIC_MECHANISM_NAMES))
    params: NumericParams = spec.make(epsilon=epsilon, domain=domain, fields=dict(fields or {}))  # type: ignore[arg-type]
    return params
