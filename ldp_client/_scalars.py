"""Which scalar types a report value may have, without importing numpy (pure Python).

A report built by numpy code (simulation, server) may hold numpy scalars (``numpy.int64``,
``numpy.bool_``); a device's reports never do, and the device path must not import numpy. A value can
only be a numpy scalar if numpy is already loaded, so that is when numpy's types are accepted too.
"""

from __future__ import annotations

import sys
from typing import SupportsIndex

__all__ = ["bool_types", "int_types"]


def bool_types() -> tuple[type, ...]:
    """``bool``, and ``numpy.bool_`` if numpy is loaded."""
    np_mod = sys.modules.get("numpy")
    return (bool,) if np_mod is None else (bool, np_mod.bool_)


def int_types() -> tuple[type[SupportsIndex], ...]:
    """``int``, and ``numpy.integer`` if numpy is loaded (``bool`` is an int: callers exclude it first)."""
    np_mod = sys.modules.get("numpy")
    return (int,) if np_mod is None else (int, np_mod.integer)
