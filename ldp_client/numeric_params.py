"""The numeric (mean) mechanisms' parameters, where they were imported from before the mechanism registry.

Each numeric mechanism is now defined in one module of :mod:`ldp_client.mechanisms.numeric` (laplace,
duchi, piecewise with hybrid, sr, multidim; the integer design they share is described in
:mod:`ldp_client.mechanisms.numeric.base`). This module re-exports their public names so that existing
imports keep working.
"""

from __future__ import annotations

from ldp_client.mechanisms.numeric import (
    DEFAULT_CELLS,
    DEFAULT_LAPLACE_GRID,
    HYBRID_EPSILON_STAR,
    MAX_ATTRIBUTES,
    MAX_CODES,
    NUMERIC_MECHANISM_NAMES,
    NUMERIC_PARAM_CLASSES,
    OUT_OF_RANGE_POLICIES,
    BaseParams,
    DuchiParams,
    HybridParams,
    LaplaceParams,
    LaplaceTable,
    MultidimParams,
    NumericLayout,
    NumericParams,
    OneDimParams,
    OutOfRange,
    PiecewiseParams,
    SRParams,
    default_k,
    is_numeric,
    laplace_table,
    make_numeric_params,
    parse_ranges,
    piecewise_design,
    position,
    positions,
)

__all__ = [
    "DEFAULT_CELLS",
    "DEFAULT_LAPLACE_GRID",
    "HYBRID_EPSILON_STAR",
    "MAX_ATTRIBUTES",
    "MAX_CODES",
    "NUMERIC_MECHANISM_NAMES",
    "NUMERIC_PARAM_CLASSES",
    "OUT_OF_RANGE_POLICIES",
    "BaseParams",
    "DuchiParams",
    "HybridParams",
    "LaplaceParams",
    "LaplaceTable",
    "MultidimParams",
    "NumericLayout",
    "NumericParams",
    "OneDimParams",
    "OutOfRange",
    "PiecewiseParams",
    "SRParams",
    "default_k",
    "is_numeric",
    "laplace_table",
    "make_numeric_params",
    "parse_ranges",
    "piecewise_design",
    "position",
    "positions",
]
