"""The numeric (mean estimation) mechanisms: laplace, duchi, piecewise, hybrid, sr, multidim.

Each mechanism is defined in one module of this package, with its parameter class, its encoder, its exact
output distribution and its ``SPEC`` (:mod:`ldp_client.spec`, listed by :mod:`ldp_client.registry`):

==========  =====================================  ==================================================
module      mechanism                              reference
==========  =====================================  ==================================================
laplace     bounded-input discrete Laplace         Ghosh et al. STOC 2009; Canonne et al. NeurIPS 2020
duchi       one bit, linear in the value           Duchi, Jordan, Wainwright, JASA 2018
piecewise   piecewise, and hybrid (piecewise or    Wang et al., ICDE 2019
            duchi)
sr          stochastic rounding + randomized       Ding, Kulkarni, Yekhanin, NeurIPS 2017 (1BitMean)
            response
multidim    k of D attributes over a base of       Wang et al., ICDE 2019, Algorithm 4
            duchi, piecewise or hybrid
==========  =====================================  ==================================================

What they share is in :mod:`~ldp_client.mechanisms.numeric.base` (ranges, positions, integer codes and
their map to estimates, the encoder plumbing; its docstring explains the integer design) and
:mod:`~ldp_client.mechanisms.numeric.codec` (the wire layout of codes and the spec of the one-dimensional
mechanisms); :mod:`~ldp_client.mechanisms.numeric.family` lists the family's specs and holds the functions
that take any of its mechanisms. Every mechanism is of kind MEAN and uses the ``moments`` accumulator
layout; the server's estimator is :mod:`ldp_aggregator.means`.

This package re-exports the public names of its modules. Its modules import one another and the bottom
layer of ``ldp_client``, never this package; importing it does not import numpy.
"""

from ldp_client.mechanisms.numeric.base import (
    DEFAULT_CELLS,
    DEFAULT_LAPLACE_GRID,
    MAX_ATTRIBUTES,
    MAX_CODES,
    OUT_OF_RANGE_POLICIES,
    NumericLayout,
    OneDimEncoder,
    OutOfRange,
    RangeParams,
    parse_ranges,
    position,
    positions,
)
from ldp_client.mechanisms.numeric.codec import OneDimSpec
from ldp_client.mechanisms.numeric.duchi import DuchiEncoder, DuchiParams
from ldp_client.mechanisms.numeric.family import (
    NUMERIC_MECHANISM_NAMES,
    NUMERIC_PARAM_CLASSES,
    NUMERIC_SPECS,
    NumericEncoder,
    NumericParams,
    OneDimParams,
    exact_distribution,
    is_numeric,
    make_numeric_params,
    numeric_encoder,
)
from ldp_client.mechanisms.numeric.laplace import LaplaceEncoder, LaplaceParams, LaplaceTable, laplace_table
from ldp_client.mechanisms.numeric.multidim import (
    BaseParams,
    MultidimEncoder,
    MultidimParams,
    default_k,
    make_multidim,
)
from ldp_client.mechanisms.numeric.piecewise import (
    HYBRID_EPSILON_STAR,
    HybridEncoder,
    HybridParams,
    PiecewiseEncoder,
    PiecewiseParams,
    piecewise_design,
)
from ldp_client.mechanisms.numeric.sr import SREncoder, SRParams

__all__ = [
    "DEFAULT_CELLS",
    "DEFAULT_LAPLACE_GRID",
    "HYBRID_EPSILON_STAR",
    "MAX_ATTRIBUTES",
    "MAX_CODES",
    "NUMERIC_MECHANISM_NAMES",
    "NUMERIC_PARAM_CLASSES",
    "NUMERIC_SPECS",
    "OUT_OF_RANGE_POLICIES",
    "BaseParams",
    "DuchiEncoder",
    "DuchiParams",
    "HybridEncoder",
    "HybridParams",
    "LaplaceEncoder",
    "LaplaceParams",
    "LaplaceTable",
    "MultidimEncoder",
    "MultidimParams",
    "NumericEncoder",
    "NumericLayout",
    "NumericParams",
    "OneDimEncoder",
    "OneDimParams",
    "OneDimSpec",
    "OutOfRange",
    "PiecewiseEncoder",
    "PiecewiseParams",
    "RangeParams",
    "SREncoder",
    "SRParams",
    "default_k",
    "exact_distribution",
    "is_numeric",
    "laplace_table",
    "make_multidim",
    "make_numeric_params",
    "numeric_encoder",
    "parse_ranges",
    "piecewise_design",
    "position",
    "positions",
]
