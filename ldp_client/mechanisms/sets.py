"""Set-valued frequency estimation by padding and sampling, over any single-item frequency oracle.

Qin, Yang, Yu, Khalil, Xiao, Ren, "Heavy Hitter Estimation over Set-Valued Data with Local Differential
Privacy" (LDPMiner), CCS 2016; Wang, Li, Jha, "Locally Differentially Private Frequent Itemset Mining",
IEEE S&P 2018 (padding and sampling frequency oracle). A user holds a set S of at most L distinct values
of a domain of size d:

1. pad S to L items: slot i < |S| holds the i-th member of S, slot i >= |S| the dummy value d + i;
2. draw a slot uniformly from [0, L) (Lemire's unbiased method on a CSPRNG word);
3. report the slot's item with the inner oracle (GRR, OUE, SUE, OLH, BLH, SS or HR) over the extended
   domain [0, d + L) at the full epsilon.

Each member of S is reported with probability exactly 1/L; which member occupies which slot does not
matter. The output law is a mixture, over the slot, of epsilon-LDP laws, so the whole report is
epsilon-LDP for any two input sets. Reports are those of the inner oracle; the estimator multiplies the
inner estimate by L (:class:`~ldp_client.params.SetValuedParams`).

Batch input (simulation): an integer matrix ``(n, L)`` whose row r lists user r's items, with -1 in
unused slots (anywhere in the row); slot i of a row with -1 is the dummy d + i. Importing this module
does not import numpy.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ldp_client import randomness as _rnd
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.mechanisms.grr import GRREncoder
from ldp_client.mechanisms.hr import HadamardEncoder
from ldp_client.mechanisms.olh import LocalHashEncoder
from ldp_client.mechanisms.ss import SubsetSelectionEncoder
from ldp_client.mechanisms.ue import UnaryEncoder
from ldp_client.params import (
    GRRParams,
    HadamardParams,
    InnerOracleParams,
    OLHParams,
    OUEParams,
    SetValuedParams,
    SubsetSelectionParams,
    SUEParams,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

__all__ = ["OracleEncoder", "SetValuedEncoder", "oracle_encoder"]

OracleEncoder = GRREncoder | UnaryEncoder | LocalHashEncoder | SubsetSelectionEncoder | HadamardEncoder


def oracle_encoder(params: InnerOracleParams) -> OracleEncoder:
    """The per-report/batch encoder of a single-item frequency oracle's parameters.

    Raises:
        InvalidParameterError: ``params`` is not the parameters of grr, oue, sue, olh, blh, ss or hr.
    """
    if isinstance(params, GRRParams):
        return GRREncoder(params)
    if isinstance(params, OUEParams | SUEParams):
        return UnaryEncoder(params)
    if isinstance(params, OLHParams):
        return LocalHashEncoder(params)
    if isinstance(params, SubsetSelectionParams):
        return SubsetSelectionEncoder(params)
    if isinstance(params, HadamardParams):
        return HadamardEncoder(params)
    raise InvalidParameterError(
        "params", type(params).__name__, "the parameters of grr, oue, sue, olh, blh, ss or hr"
    )


class SetValuedEncoder:
    """Encodes a set of at most L values per report by padding and sampling (module docstring).

    Raises:
        InvalidParameterError: ``params`` is not a :class:`SetValuedParams`.
    """

    __slots__ = ("_d", "_domain", "_inner", "_max", "params")

    def __init__(self, params: SetValuedParams) -> None:
        if not isinstance(params, SetValuedParams):
            raise InvalidParameterError("params", type(params).__name__, "a SetValuedParams")
        self.params = params
        self._d = params.domain.size
        self._max = params.max_items
        self._domain = params.domain
        self._inner = oracle_encoder(params.inner)

    def __repr__(self) -> str:
        return f"SetValuedEncoder(params={self.params!r})"

    @property
    def inner(self) -> OracleEncoder:
        """The inner oracle's encoder (over the extended domain of size d + L)."""
        return self._inner

    def items_of(self, values: Iterable[str | int]) -> list[int]:
        """Validate a set of values: indices of at most L distinct domain values, in the given order.

        Raises:
            DomainError: not an iterable of values (a str is one value, not a set), a value outside the
                domain, a repeated value, or more than L values.
        """
        if isinstance(values, str | bytes) or not isinstance(values, Iterable):
            raise DomainError("values", values, f"a set or sequence of at most {self._max} domain values")
        items: list[int] = []
        seen: set[int] = set()
        index = self._domain.index
        for v in values:
            i = index(v, "values")
            if i in seen:
                raise DomainError("values", v, "distinct values (this one is repeated)")
            seen.add(i)
            items.append(i)
            if len(items) > self._max:
                raise DomainError(
                    "values",
                    f"<more than {self._max} values>",
                    f"a set of at most max_items={self._max} values",
                )
        return items

    def encode(self, values: Iterable[str | int]) -> Any:
        """Randomize one user's set with the OS CSPRNG; returns the inner oracle's report.

        Raises:
            DomainError: see :meth:`items_of`.
        """
        items = self.items_of(values)
        slot = _rnd.uniform_below(self._max, int.from_bytes(_rnd._source(4), "little"))
        item = items[slot] if slot < len(items) else self._d + slot
        return self._inner.encode_index(item)

    def padded_items(self, sets: ArrayLike, rng: np.random.Generator) -> NDArray[np.int64]:
        """Steps 1-2 of the module docstring, vectorised: the sampled padded item of each row.

        Raises:
            DomainError: ``sets`` is not an integer matrix (n, L), holds a value outside [-1, d), or a row
                repeats a value.
        """
        import numpy as np

        arr = np.asarray(sets)
        L, d = self._max, self._d
        if arr.ndim != 2 or arr.shape[1] != L or (arr.size and arr.dtype.kind not in "iu"):
            raise DomainError(
                "sets", f"<array of shape {arr.shape}, dtype {arr.dtype}>", f"an integer matrix (n, {L})"
            )
        n = arr.shape[0]
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        vals = arr.astype(np.int64, copy=False)
        lo, hi = int(vals.min()), int(vals.max())
        if lo < -1 or hi >= d:
            raise DomainError(
                "sets", lo if lo < -1 else hi, f"items in [0, {d - 1}], or -1 for an empty slot"
            )
        if L > 1:
            srt = np.sort(vals, axis=1)
            dup = (srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)
            if dup.any():
                row = int(np.argmax(dup.any(axis=1)))
                raise DomainError(f"sets[{row}]", vals[row].tolist(), "distinct items in each row")
        slot = rng.integers(0, L, size=n, dtype=np.int64)
        item = vals[np.arange(n), slot]
        return np.where(item >= 0, item, d + slot)

    def encode_batch(self, sets: ArrayLike, rng: np.random.Generator) -> Any:
        """Randomize n users' sets with a seeded numpy Generator. For simulation only.

        Args:
            sets: integer matrix (n, L): row r holds user r's items, -1 in unused slots.
            rng: an explicit :class:`numpy.random.Generator`.

        Returns:
            The inner oracle's batch columns for the sampled padded items.

        Raises:
            DomainError: see :meth:`padded_items`.
            InvalidParameterError: ``rng`` is not a numpy Generator.
        """
        import numpy as np

        if not isinstance(rng, np.random.Generator):
            raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
        return self._inner.encode_batch(self.padded_items(sets, rng), rng)
