"""Mergeable sufficient statistics of report batches: ``zero()``, add a batch, ``+``, bytes round trip.

Every estimator in :mod:`ldp_aggregator.estimators` is a function of these sums only, so ingest,
simulation and scale-out all reduce to "map batches to accumulators, merge, estimate" (the design of
PipelineDP's accumulators).

A mechanism registered in :mod:`ldp_client.registry` names its accumulator by *layout*
(:class:`ldp_client.spec.Layout`): :data:`LAYOUT_ACCUMULATORS` maps the layout kind to the class
(``counts`` -> :class:`CountAccumulator`, ``bits`` -> :class:`BitCountAccumulator`, ``support`` ->
:class:`~ldp_aggregator.support.SupportCountAccumulator`, ``moments`` ->
:class:`~ldp_aggregator.moments.MeanAccumulator`, ``paired`` ->
:class:`~ldp_aggregator.paired_accumulator.PairedAccumulator`), and every function below creates, checks and
feeds a campaign's accumulator through that table and the spec (``spec.layout(params)``,
``spec.layout_batch(params, columns)``), never by mechanism. The two layouts of the RR and RAPPOR families,
each in its own module:

- :class:`CountAccumulator` (:mod:`ldp_aggregator.count_accumulator`): how many reports took each value.
  Binary RR uses size 2 (index 0 = "no", 1 = "yes"); GRR uses the domain size d.
- :class:`BitCountAccumulator` (:mod:`ldp_aggregator.bit_accumulator`): per cohort, the number of reports
  and, per bit, how many reports set it. String RAPPOR has m cohorts of k bits; basic RAPPOR (k = d) and
  boolean RAPPOR (k = 1) use m = 1.

Adding a batch mutates the accumulator in place (the store adds every committed batch to one running
accumulator, and d or m*k can be large, so a copy per batch would dominate); ``a + b`` returns a new
accumulator and ``a += b`` merges in place. The batch column formats are the shared report contract
(see ``.cache/HELPER_BRIEF.md``): rr a bool array, grr an int64 array, rappor ``(cohorts uint32 (n,),
bits uint8 (n, ceil(k/8)))`` with little bit order, basic/boolean RAPPOR a bits array.

Their serialized form (``to_bytes``, the ``LDPA`` frame) is described and checked in
:mod:`ldp_aggregator.accumulator_format`. ``from_bytes`` checks every field and the checksum and raises
:class:`CorruptAccumulatorError` naming what is wrong; it never returns an accumulator that violates its
invariants (non-negative counts, ones <= reports per cohort).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol, Self, cast

from ldp_aggregator.accumulator_errors import CorruptAccumulatorError
from ldp_aggregator.accumulator_format import FORMAT_VERSION, KIND_COUNTS, MAGIC, unframe
from ldp_aggregator.bit_accumulator import BitCountAccumulator, BitRows
from ldp_aggregator.count_accumulator import CountAccumulator
from ldp_aggregator.moments import MEAN_MAGIC, MeanAccumulator
from ldp_aggregator.paired_accumulator import PAIRED_MAGIC, PairedAccumulator
from ldp_aggregator.support import SUPPORT_MAGIC, SupportCountAccumulator
from ldp_client import registry
from ldp_client.errors import InvalidParameterError, InvalidReportError

if TYPE_CHECKING:
    from ldp_client.params import MechanismParams
    from ldp_client.spec import Layout

__all__ = [
    "FORMAT_VERSION",
    "LAYOUT_ACCUMULATORS",
    "MAGIC",
    "Accumulator",
    "BitCountAccumulator",
    "BitRows",
    "CompositeAccumulator",
    "CorruptAccumulatorError",
    "CountAccumulator",
    "LayoutAccumulator",
    "accumulator_for",
    "accumulator_from_bytes",
    "accumulator_from_sums",
    "accumulator_nbytes",
    "add_columns",
    "batch_delta",
    "check_matches",
]


Accumulator = (
    CountAccumulator | BitCountAccumulator | MeanAccumulator | SupportCountAccumulator | PairedAccumulator
)
"""MeanAccumulator (numeric mechanisms, issue 6) is defined in :mod:`ldp_aggregator.moments`, with its own
magic b"LDPM" and format; SupportCountAccumulator (frequency oracles, issue 6) in
:mod:`ldp_aggregator.support`, with magic b"LDPS"; PairedAccumulator (paired campaigns, issue 5) in
:mod:`ldp_aggregator.paired_accumulator`, with magic b"LDPP"."""


class LayoutAccumulator(Protocol):
    """The interface of a layout's accumulator class (:data:`LAYOUT_ACCUMULATORS`)."""

    layout_kind: ClassVar[str]

    @classmethod
    def of_shape(cls, shape: tuple[int, ...]) -> Self: ...

    @classmethod
    def from_sums(cls, sums: Any) -> Self: ...

    @classmethod
    def delta_of(cls, shape: tuple[int, ...], batch: Any) -> Any: ...

    @property
    def layout_shape(self) -> tuple[int, ...]: ...

    def add_batch(self, batch: Any) -> None: ...


LAYOUT_ACCUMULATORS: Final[dict[str, type[LayoutAccumulator]]] = {
    cls.layout_kind: cls
    for cls in (
        CountAccumulator,
        BitCountAccumulator,
        SupportCountAccumulator,
        MeanAccumulator,
        PairedAccumulator,
    )
}
"""The accumulator class of each layout kind (:class:`ldp_client.spec.Layout`). A composite layout (with
``parts``: ``paired``) is made of its parts' accumulators (:func:`_empty`), and its class shows them as
``layout_parts``."""


def _layout_class(layout: Layout) -> type[LayoutAccumulator]:
    cls = LAYOUT_ACCUMULATORS.get(layout.kind)
    if cls is None:  # a spec names a layout this aggregator has no accumulator for
        raise InvalidParameterError("layout", layout.kind, f"one of {', '.join(LAYOUT_ACCUMULATORS)}")
    return cls


class CompositeAccumulator(LayoutAccumulator, Protocol):
    """A composite layout's accumulator (``Layout.parts``): made of its parts' accumulators."""

    @classmethod
    def of_parts(cls, parts: tuple[Any, ...], shape: tuple[int, ...]) -> Self: ...

    @property
    def layout_parts(self) -> tuple[Any, ...]: ...


def _empty(layout: Layout) -> LayoutAccumulator:
    """The empty accumulator of a layout (of its parts' empty accumulators, for a composite layout)."""
    cls = _layout_class(layout)
    if layout.parts:
        composite = cast("type[CompositeAccumulator]", cls)
        return composite.of_parts(tuple(_empty(part) for part in layout.parts), layout.shape)
    return cls.of_shape(layout.shape)


def _matches(acc: object, layout: Layout) -> bool:
    """``acc`` is the accumulator ``layout`` describes: its class and shape, and its parts' (recursively)."""
    if not isinstance(acc, _layout_class(layout)) or acc.layout_shape != layout.shape:
        return False
    if not layout.parts:
        return True
    parts = cast(CompositeAccumulator, acc).layout_parts
    return len(parts) == len(layout.parts) and all(
        _matches(part, part_layout) for part, part_layout in zip(parts, layout.parts, strict=True)
    )


def accumulator_from_bytes(data: bytes | bytearray | memoryview) -> Accumulator:
    """Decode any accumulator from its ``to_bytes`` (the format is told by its magic bytes)."""
    if isinstance(data, bytes | bytearray | memoryview) and bytes(data[:4]) == MEAN_MAGIC:
        return MeanAccumulator.from_bytes(data)
    if isinstance(data, bytes | bytearray | memoryview) and bytes(data[:4]) == SUPPORT_MAGIC:
        return SupportCountAccumulator.from_bytes(data)
    if isinstance(data, bytes | bytearray | memoryview) and bytes(data[:4]) == PAIRED_MAGIC:  # issue 5
        return PairedAccumulator.from_bytes(data, accumulator_from_bytes)
    kind, _, _ = unframe(data)
    if kind == KIND_COUNTS:
        return CountAccumulator.from_bytes(data)
    return BitCountAccumulator.from_bytes(data)


def accumulator_for(params: MechanismParams) -> Accumulator:
    """The empty accumulator for a campaign's mechanism parameters: its layout's (``spec.layout``)."""
    return cast(Accumulator, _empty(registry.spec_for(params).layout(params)))


def accumulator_nbytes(params: MechanismParams) -> int:
    """About how many bytes a campaign's accumulator takes (in memory and serialized), without building it.

    Its layout's ``nbytes``: 64-bit counters times 8, plus a small allowance for the headers (a bound, for
    a layout whose exact integers grow). The service refuses a campaign whose accumulator would exceed its
    limit before allocating anything (the largest RAPPOR campaign the parameters allow, k = 4096 and
    m = 65536, would need 2 GiB).
    """
    return registry.spec_for(params).layout(params).nbytes


def check_matches(acc: Accumulator, params: MechanismParams) -> None:
    """Raise :class:`InvalidReportError` unless ``acc`` is the accumulator ``params``' layout describes (its
    class and shape, and its parts', for a composite layout)."""
    layout = registry.spec_for(params).layout(params)
    if _matches(acc, layout):
        return
    if isinstance(acc, tuple(LAYOUT_ACCUMULATORS.values())):
        value = f"{type(acc).__name__} of shape {cast(LayoutAccumulator, acc).layout_shape}"
    else:  # not an accumulator at all
        value = repr(acc)
    allowed = f"a {_layout_class(layout).__name__} of shape {layout.shape} for mechanism {params.name!r}"
    raise InvalidReportError("accumulator", value, allowed)


def add_columns(acc: Accumulator, params: MechanismParams, columns: Any) -> None:
    """Add one batch of decoded columns (``ldp_client.wire``'s contract) to ``acc`` (in place): the layout's
    standard input (``spec.layout_batch``), added by the layout's class.

    Raises:
        InvalidReportError: the accumulator does not belong to ``params``, or the batch is malformed.
    """
    spec = registry.spec_for(params)
    check_matches(acc, params)
    cast(LayoutAccumulator, acc).add_batch(spec.layout_batch(params, columns))


def batch_delta(params: MechanismParams, columns: Any) -> Accumulator | BitRows:
    """What one validated batch adds to its campaign's accumulator (``committed + delta``).

    For the bit-count mechanisms (rappor, basic-rappor, boolean-rappor) and at most 16 reports, a
    :class:`BitRows` (no (m, k) temporary: the single-report RPC's case); otherwise a fresh accumulator
    with the batch added (:func:`add_columns`).

    Raises:
        InvalidReportError: the batch is malformed (as :func:`add_columns`).
    """
    spec = registry.spec_for(params)
    layout = spec.layout(params)
    batch = spec.layout_batch(params, columns)
    if layout.parts:  # a composite: an empty one with the batch added
        empty = _empty(layout)
        empty.add_batch(batch)
        return cast(Accumulator, empty)
    return cast("Accumulator | BitRows", _layout_class(layout).delta_of(layout.shape, batch))


def accumulator_from_sums(params: MechanismParams, sums: Any) -> Accumulator:
    """The accumulator of a registered mechanism's campaign holding ``sums`` (in its layout's form, as a
    spec's exact sum sampler returns them: :class:`ldp_client.spec.SumSampler`).

    Raises:
        InvalidParameterError: ``params`` is not the parameters of a registered mechanism.
        InvalidReportError: ``sums`` do not fit the layout.
    """
    spec = registry.spec_for(params)
    layout = spec.layout(params)
    acc = _layout_class(layout).from_sums(sums)
    check_matches(cast(Accumulator, acc), params)
    return cast(Accumulator, acc)
