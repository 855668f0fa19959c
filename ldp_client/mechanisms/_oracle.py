"""What the single-item frequency oracles share: the parameter base class, the spec base, d-bit report rows.

The oracles of Wang, Blocki, Li, Jha, "Locally Differentially Private Protocols for Frequency Estimation",
USENIX Security 2017, §4 (unary encoding, local hashing, subset selection, Hadamard response) are "pure": a
report supports item v with probability p* if its user holds v and q* otherwise, so the one pure-oracle
estimator (:class:`ldp_client.spec.Support`) serves them all. Each mechanism module (``ue``, ``olh``, ``ss``,
``hr``) subclasses:

* :class:`FrequencyOracle`, the frozen parameter base: a declared ``domain``, the rates ``p_star`` and
  ``q_star`` (from the quantized thresholds), ``epsilon``, ``report_bits`` and ``variance()``;
* :class:`OracleSpec`, the spec base: kind SUPPORT over the domain's items, parameters by name through the
  class's ``_make``, the rates of the parameters, the ``support`` layout of d support counts (overridden by
  Hadamard response, which keeps the counts of reported indices), and ``auto``'s hooks;
* :class:`BitRowsSpec` for the oracles whose report is a d-bit row (oue, sue, ss): the ``ldp.v1`` bit-row
  payload, its journal rows, and the support counts of a batch (how many rows set each bit).

d-bit rows: one report is ceil(d/8) bytes, bit i = ``(row[i // 8] >> (i % 8)) & 1`` (little bit order),
padding bits 0; on the device a report is an int (bit i = report bit i). Subset selection also requires
exactly k set bits per row. Every check names the field and value; the column checks are vectorised.

Importing this module does not import numpy (the batch and server methods import it when called).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ldp_client import _oracle_math
from ldp_client.codecs import RowField, as_array, as_int, check_count, check_length, first_true
from ldp_client.domain import Domain, DomainLike
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.spec import Kind, Layout, MechanismSpec, Support, SupportView

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ldp_client._proto.ldp.v1 import reports_pb2

__all__ = [
    "BitRowsSpec",
    "FrequencyOracle",
    "OracleSpec",
    "as_domain",
    "bit_column_counts",
    "domain_items",
    "true_counts_of",
]

# Report rows per bincount call when counting bit columns (bounded temporaries, about 16 MiB of indices).
_BIT_ROWS = 1 << 14


@functools.lru_cache(maxsize=64)
def domain_items(domain: Domain) -> tuple[str, ...]:
    """The item labels of a domain (its labels, or "0".."d-1"), built once per domain: every estimate of a
    campaign names its d items, and a set-valued estimate those of its inner oracle too."""
    return tuple(domain.label(i) for i in range(domain.size))


def as_domain(obj: FrequencyOracle) -> None:
    """Turn a size or labels given for a parameter object's ``domain`` field into a :class:`Domain`."""
    if not isinstance(obj.domain, Domain):
        object.__setattr__(obj, "domain", Domain.of(obj.domain))


@dataclass(frozen=True, kw_only=True)
class FrequencyOracle:
    """Shared interface of the frequency oracles (Wang et al., USENIX Security 2017, §4).

    A report *supports* item v with probability ``p_star`` if the user holds v and ``q_star`` otherwise;
    the unbiased estimate of a count is (C_v - n q*)/(p* - q*) and n Var[f_hat_v] is :meth:`variance`.
    ``report_bits`` is the size of one report as uploaded.
    """

    name: ClassVar[str]
    domain: Domain

    @property
    def p_star(self) -> float:
        raise NotImplementedError

    @property
    def q_star(self) -> float:
        raise NotImplementedError

    @property
    def epsilon(self) -> float:
        raise NotImplementedError

    @property
    def report_bits(self) -> int:
        raise NotImplementedError

    def variance(self, frequency: float = 0.0) -> float:
        """n Var[f_hat_v] = (q*(1-q*) + f (p*-q*)(1-p*-q*)) / (p*-q*)^2 at true frequency f (default 0)."""
        return _oracle_math.oracle_variance(self.p_star, self.q_star, frequency)

    @classmethod
    def _make(
        cls, *, epsilon: float | None, domain: object, fields: dict[str, object]
    ) -> FrequencyOracle:  # pragma: no cover - every concrete class overrides it
        raise NotImplementedError


OP = TypeVar("OP", bound=FrequencyOracle)


class OracleSpec(MechanismSpec[OP]):
    """The spec of a single-item frequency oracle over a declared domain (module docstring).

    Items are the domain's values; a device encodes the label (or the integer of an integer domain). The
    parameters are built by name with the class's ``_make`` (``epsilon`` and the optional free parameter,
    or every field); the rates are the parameters' ``p_star``/``q_star``; ``auto`` compares every oracle
    (:attr:`chosen_by_auto`). The ``support`` layout holds d support counts, read back as the Support.
    """

    kind: ClassVar[Kind] = Kind.SUPPORT
    takes_domain: ClassVar[bool] = True
    chosen_by_auto: ClassVar[bool] = True

    def make(self, *, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]) -> OP:
        return self.params_type._make(epsilon=epsilon, domain=domain, fields=fields)  # type: ignore[no-any-return]

    @staticmethod
    def domain_arg(params: FrequencyOracle) -> int | tuple[str, ...]:
        """The ``domain`` of :meth:`make_args`: the labels, or the size of an integer domain."""
        dom = params.domain
        return dom.labels if dom.labels is not None else dom.size

    def report_bits(self, params: OP) -> int:
        return params.report_bits

    def items(self, params: OP) -> tuple[str, ...]:
        return domain_items(params.domain)

    def input_value(self, params: OP, index: int) -> Any:
        return params.domain.value(index)

    def support_rates(self, params: OP) -> tuple[float, float]:
        return params.p_star, params.q_star

    def layout(self, params: OP) -> Layout:
        return Layout.support(params.domain.size)

    def support(self, params: OP, acc: Any, candidates: Sequence[str] = ()) -> Support:
        """The Support of a ``support`` layout accumulator (:class:`~ldp_client.spec.SupportView`)."""
        view: SupportView = acc
        p_star, q_star = self.support_rates(params)
        return Support(labels=self.items(params), counts=view.support, n=view.n, p_star=p_star, q_star=q_star)


def true_counts_of(d: int, true_counts: object) -> NDArray[np.int64]:
    """``true_counts`` of an exact sum sampler as int64: d non-negative integer counts (simulation)."""
    import numpy as np

    c = np.asarray(true_counts)
    if c.ndim != 1 or c.shape[0] != d or c.dtype.kind not in "iu":
        raise InvalidParameterError(
            "true_counts", f"<array shape={c.shape} dtype={c.dtype}>", f"{d} integer counts"
        )
    out = c.astype(np.int64)
    if out.size and int(out.min()) < 0:
        raise InvalidParameterError("true_counts", int(out.min()), "non-negative counts")
    return out


# ------------------------------------------------------------------------------------------ d-bit rows


def check_rows(rows: NDArray[np.uint8], d: int, k: int | None, field: str) -> None:
    """Padding bits of every row are 0; with ``k`` (subset selection) every row has exactly k bits set."""
    import numpy as np

    used = d % 8
    if used and rows.shape[0]:
        pad = 0xFF & ~((1 << used) - 1)
        bad = (rows[:, -1] & pad) != 0
        if bad.any():
            row = first_true(bad)
            raise InvalidReportError(
                f"{field}[{row}][{rows.shape[1] - 1}]",
                int(rows[row, -1]),
                f"a last byte whose padding bits {used}..7 are 0 (a {d}-bit row)",
            )
    if k is not None and rows.shape[0]:
        counts = np.bitwise_count(rows).sum(axis=1, dtype=np.int64)
        bad = counts != k
        if bad.any():
            row = first_true(bad)
            raise InvalidReportError(
                f"{field}[{row}]", f"<{int(counts[row])} bits set>", f"exactly k={k} bits set"
            )


def bits_value(field: str, report: object, d: int, k: int | None) -> bytes:
    """One report (an int of d bits; with ``k``, exactly k of them set) as its ceil(d/8) row bytes."""
    allowed = f"an integer in [0, 2**{d}) (bit i = value i)"
    value = as_int(field, report, allowed)
    if not 0 <= value < 1 << d:
        raise InvalidReportError(field, value, allowed)
    if k is not None and value.bit_count() != k:
        raise InvalidReportError(field, f"<{value.bit_count()} bits set>", f"exactly k={k} bits set")
    return value.to_bytes((d + 7) // 8, "little")


def bit_column_counts(bits: NDArray[np.uint8], d: int) -> NDArray[np.int64]:
    """How many rows set each bit 0..d-1 of packed rows (n, ceil(d/8)) in little bit order.

    Counts (byte position, byte value) pairs with one ``np.bincount`` per block of rows (n ceil(d/8)
    work, not n d) and turns byte-value counts into bit counts with a (256 x 8) 0/1 matrix.
    """
    import numpy as np

    n, nb = bits.shape
    table = np.zeros(nb * 256, dtype=np.int64)
    offset = np.arange(nb, dtype=np.intp) * 256
    for start in range(0, n, _BIT_ROWS):
        block = bits[start : start + _BIT_ROWS]
        table += np.bincount((offset + block).ravel(), minlength=nb * 256)
    ones = (table.reshape(nb, 256) @ _byte_bits()).reshape(nb * 8)
    return ones[:d]


@functools.cache
def _byte_bits() -> NDArray[np.int64]:
    """The (256, 8) 0/1 table whose row b holds the 8 bits of byte value b, bit 0 first (built once)."""
    import numpy as np

    table = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")
    return table.astype(np.int64)


def _support_rows(bits: object, name: str, d: int, k: int | None) -> NDArray[np.uint8]:
    """Decoded d-bit rows as the aggregator takes them (uint8 (n, ceil(d/8)), zero padding, ss: k bits)."""
    import numpy as np

    nb = (d + 7) // 8
    arr = np.asarray(bits)
    if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[1] != nb:
        raise InvalidReportError(
            "reports", f"{arr.dtype}{arr.shape}", f"uint8 rows of shape (n, {nb}) for {name} (d={d})"
        )
    if arr.shape[0] == 0:
        return arr
    spare = nb * 8 - d
    if spare and int(np.bitwise_or.reduce(arr[:, -1])) >> (8 - spare):
        raise InvalidReportError("reports", "a set bit at index >= d", f"bits 0..{d - 1} only (padding is 0)")
    if k is not None:
        counts = np.bitwise_count(arr).sum(axis=1, dtype=np.int64)
        bad = counts != k
        if bad.any():
            row = int(np.argmax(bad))
            raise InvalidReportError(f"reports[{row}]", f"<{int(counts[row])} bits set>", f"exactly k={k}")
    return arr


class BitRowsSpec(OracleSpec[OP]):
    """An oracle whose report is a d-bit row (oue, sue, ss): payload, journal row and support counts.

    Wire: ``ReportBatch.<wire.batch>`` holds n rows of ceil(d/8) bytes; ``Report.<wire.report>`` one row.
    Journal row: the ceil(d/8) row bytes. Support of item v: the reports with bit v set, so the ``support``
    layout's input of a batch is (n, the number of rows setting each bit).
    """

    def subset_size(self, params: OP) -> int | None:
        """The number of bits every report sets (subset selection's k), or None when it varies."""
        return None

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: OP, columns: Any) -> None:
        import numpy as np

        field = self.wire.batch
        rows = as_array(field, columns, "uint8 packed bit rows", 2)
        nbytes = (params.domain.size + 7) // 8
        if rows.dtype != np.uint8 or rows.shape[1] != nbytes:
            raise InvalidReportError(field, f"{rows.dtype}{rows.shape}", f"uint8 of shape (n, {nbytes})")
        check_count("count", rows.shape[0])
        check_rows(rows, params.domain.size, self.subset_size(params), field)
        msg.count = rows.shape[0]
        setattr(msg, field, np.ascontiguousarray(rows).tobytes())

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: OP, n: int) -> Any:
        import numpy as np

        field = self.wire.batch
        raw = getattr(msg, field)
        nbytes = (params.domain.size + 7) // 8
        check_length(field, raw, n * nbytes, f"count * ceil(d/8) = {n} * {nbytes}")
        rows = np.frombuffer(raw, dtype=np.uint8).reshape(n, nbytes)
        check_rows(rows, params.domain.size, self.subset_size(params), field)
        return rows

    def report_to_proto(self, msg: reports_pb2.Report, params: OP, output: Any) -> None:
        value = bits_value("report", output, params.domain.size, self.subset_size(params))
        setattr(msg, self.wire.report, value)

    def report_from_proto(self, msg: reports_pb2.Report, params: OP) -> Any:
        import numpy as np

        field = self.wire.report
        raw = getattr(msg, field)
        d = params.domain.size
        nbytes = (d + 7) // 8
        check_length(field, raw, nbytes, f"ceil(d/8) for d={d}")
        rows = np.frombuffer(raw, dtype=np.uint8).reshape(1, nbytes)
        check_rows(rows, d, self.subset_size(params), field)
        return rows

    def batch_from_reports(self, params: OP, reports: Sequence[Any]) -> Any:
        import numpy as np

        d, k = params.domain.size, self.subset_size(params)
        rows = b"".join(bits_value(f"reports[{i}]", r, d, k) for i, r in enumerate(reports))
        # A bytearray buffer, so the rows are writable like any other client-side array.
        return np.frombuffer(bytearray(rows), dtype=np.uint8).reshape(len(reports), (d + 7) // 8)

    def row_fields(self, params: OP) -> tuple[RowField, ...]:
        return (RowField((self.wire.batch,), (params.domain.size + 7) // 8),)

    def row_packer(self, params: OP) -> Callable[[Any], bytes]:
        nbytes = (params.domain.size + 7) // 8
        return lambda r: r.to_bytes(nbytes, "little")

    def row_unpacker(self, params: OP) -> Callable[[bytes], Any]:
        return _row_int

    def layout_batch(self, params: OP, columns: Any) -> Any:
        d = params.domain.size
        rows = _support_rows(columns, params.name, d, self.subset_size(params))
        return int(rows.shape[0]), bit_column_counts(rows, d)


def _row_int(row: bytes) -> int:
    """A journal row's little-endian bytes as the int report they packed."""
    return int.from_bytes(row, "little")
