"""Accumulators: exact counting, merging, bit order, validation and the bytes format (no sampling needed:
random inputs are compared with a straightforward reference computation)."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from ldp_aggregator import bit_accumulator as acc_mod  # its tuning constants, set small below
from ldp_aggregator.accumulators import (
    BitCountAccumulator,
    BitRows,
    CorruptAccumulatorError,
    CountAccumulator,
    accumulator_for,
    accumulator_from_bytes,
    add_columns,
    batch_delta,
    check_matches,
)
from ldp_aggregator.moments import MeanAccumulator
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.params import (
    BasicRapporParams,
    BinaryRRParams,
    BooleanRapporParams,
    GRRParams,
    RapporParams,
)


def _pack(bits01: np.ndarray) -> np.ndarray:
    return np.packbits(bits01.astype(np.uint8), axis=1, bitorder="little")


def _reference_ones(bits01: np.ndarray, cohorts: np.ndarray, m: int) -> np.ndarray:
    """Per-cohort bit sums by an obvious (slow, per-cohort) computation."""
    out = np.zeros((m, bits01.shape[1]), dtype=np.int64)
    for j in range(m):
        out[j] = bits01[cohorts == j].sum(axis=0)
    return out


# ---------------------------------------------------------------------------------------------- counts


def test_count_add_values_is_bincount() -> None:
    rng = np.random.default_rng(1)
    values = rng.integers(0, 7, size=1000)
    acc = CountAccumulator.zero(7)
    acc.add_values(values)
    assert acc.counts.tolist() == np.bincount(values, minlength=7).tolist()
    assert acc.n == 1000
    assert acc.counts.dtype == np.int64


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint16, np.uint32, np.uint64])
def test_count_accepts_any_integer_dtype(dtype: type) -> None:
    acc = CountAccumulator.zero(4)
    acc.add_values(np.array([0, 3, 3, 1], dtype=dtype))
    assert acc.counts.tolist() == [1, 1, 0, 2]


def test_count_merge_equals_add_of_concatenation() -> None:
    rng = np.random.default_rng(2)
    a_vals, b_vals = rng.integers(0, 50, size=300), rng.integers(0, 50, size=700)
    a, b, both = CountAccumulator.zero(50), CountAccumulator.zero(50), CountAccumulator.zero(50)
    a.add_values(a_vals)
    b.add_values(b_vals)
    both.add_values(np.concatenate([a_vals, b_vals]))
    merged = a + b
    assert merged == both
    assert a.n == 300  # + does not mutate
    a += b
    assert a == both
    assert (CountAccumulator.zero(50) + both) == both  # zero is the identity


def test_count_empty_batch_is_noop() -> None:
    acc = CountAccumulator.zero(3)
    acc.add_values(np.array([], dtype=np.int64))
    assert acc.n == 0


@pytest.mark.parametrize(
    ("values", "match"),
    [
        (np.array([0, 1, 5]), "values=5"),
        (np.array([0, -1]), "values=-1"),
        (np.array([0.0, 1.0]), "integer"),
        (np.array([[0, 1]]), r"\(n,\)"),
    ],
)
def test_count_rejects_bad_values_and_adds_nothing(values: np.ndarray, match: str) -> None:
    acc = CountAccumulator.zero(5)
    acc.add_values(np.array([1, 2]))
    with pytest.raises(InvalidReportError, match=match):
        acc.add_values(values)
    assert acc.counts.tolist() == [0, 1, 1, 0, 0]


def test_count_shape_mismatch() -> None:
    with pytest.raises(InvalidReportError, match="size 3"):
        _ = CountAccumulator.zero(3) + CountAccumulator.zero(4)
    a = CountAccumulator.zero(3)
    with pytest.raises(InvalidReportError):
        a += CountAccumulator.zero(4)
    with pytest.raises(TypeError):
        _ = CountAccumulator.zero(2) + BitCountAccumulator.zero(1, 2)  # type: ignore[operator]


def test_count_constructor_validates() -> None:
    with pytest.raises(InvalidReportError, match="non-negative"):
        CountAccumulator([1, -2])
    with pytest.raises(InvalidReportError, match="integer"):
        CountAccumulator([1.5, 2.0])
    with pytest.raises(InvalidReportError, match="size"):
        CountAccumulator.zero(0)
    src = np.array([1, 2], dtype=np.int64)
    acc = CountAccumulator(src)
    src[0] = 99  # the accumulator owns a copy
    assert acc.counts.tolist() == [1, 2]


# ---------------------------------------------------------------------------------------------- bits


@pytest.mark.parametrize(("m", "k"), [(64, 128), (1, 13), (5, 1), (3, 4096), (200, 20), (1, 8)])
def test_bit_counts_match_reference(m: int, k: int) -> None:
    rng = np.random.default_rng(m * 10_000 + k)
    n = 3000
    bits01 = (rng.random((n, k)) < rng.random(k)).astype(np.uint8)
    cohorts = rng.integers(0, m, size=n).astype(np.uint32)
    acc = BitCountAccumulator.zero(m, k)
    acc.add_bits(_pack(bits01), cohorts if m > 1 or k % 2 else None)
    assert np.array_equal(acc.ones, _reference_ones(bits01, cohorts, m))
    assert acc.cohort_reports.tolist() == np.bincount(cohorts, minlength=m).tolist()
    assert acc.n == n


@pytest.mark.parametrize("wide", [False, True], ids=["int64-copy", "wide-rows"])
@pytest.mark.parametrize(("m", "k"), [(64, 128), (1, 13), (7, 30)])
def test_bit_counts_sorting_path_matches(monkeypatch: pytest.MonkeyPatch, m: int, k: int, wide: bool) -> None:
    """The fallback used when the byte table would be too big gives the same counts (both ways of summing
    a chunk: an int64 copy, and the 0/1 bytes summed into int64 for wide rows)."""
    rng = np.random.default_rng(7 + m + k)
    n = 2000
    bits01 = rng.integers(0, 2, size=(n, k), dtype=np.uint8)
    cohorts = rng.integers(0, m, size=n).astype(np.uint32)
    monkeypatch.setattr(acc_mod, "_BYTE_TABLE_MAX_ENTRIES", 0)
    monkeypatch.setattr(acc_mod, "_CHUNK_ELEMENTS", 64 * k)  # several chunks
    monkeypatch.setattr(acc_mod, "_WIDE_CHUNK_ELEMENTS", 0 if wide else 1 << 30)
    acc = BitCountAccumulator.zero(m, k)
    acc.add_bits(_pack(bits01), cohorts)
    assert np.array_equal(acc.ones, _reference_ones(bits01, cohorts, m))


@pytest.mark.parametrize(
    ("m", "k", "target"), [(3, 40, 3 * 256 * 2), (2000, 24, 1 << 18), (1, 4096, 256 * 7)]
)
def test_bit_counts_byte_table_in_position_groups(
    monkeypatch: pytest.MonkeyPatch, m: int, k: int, target: int
) -> None:
    """The byte table processed a few byte positions at a time (last group shorter) is exact."""
    rng = np.random.default_rng(13 + m)
    n = 40 * m + 50  # large enough for the byte-table path (n >= 32 m)
    bits01 = rng.integers(0, 2, size=(n, k), dtype=np.uint8)
    cohorts = rng.integers(0, m, size=n).astype(np.uint32)
    monkeypatch.setattr(acc_mod, "_TABLE_TARGET", target)

    def _no_sorting(*_args: object) -> None:
        raise AssertionError("expected the byte-table path")

    monkeypatch.setattr(BitCountAccumulator, "_count_by_sorting", _no_sorting)
    acc = BitCountAccumulator.zero(m, k)
    acc.add_bits(_pack(bits01), cohorts if m > 1 else None)
    assert np.array_equal(acc.ones, _reference_ones(bits01, cohorts, m))


def test_bit_counts_many_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    bits01 = rng.integers(0, 2, size=(1001, 24), dtype=np.uint8)
    cohorts = rng.integers(0, 4, size=1001).astype(np.uint32)
    monkeypatch.setattr(acc_mod, "_CHUNK_ELEMENTS", 3 * 3)  # 3 reports per chunk
    acc = BitCountAccumulator.zero(4, 24)
    acc.add_bits(_pack(bits01), cohorts)
    assert np.array_equal(acc.ones, _reference_ones(bits01, cohorts, 4))


def test_bit_order_is_little_within_bytes() -> None:
    acc = BitCountAccumulator.zero(1, 16)
    acc.add_bits(np.array([[0b0000_0001, 0], [0b1000_0000, 0], [0, 0b0000_0001], [0, 0b1000_0010]], np.uint8))
    expected = np.zeros(16, dtype=np.int64)
    expected[[0, 7, 8, 9, 15]] = 1
    assert acc.ones[0].tolist() == expected.tolist()
    # The contract's int form: bits.to_bytes(nbytes, "little").
    report = (1 << 3) | (1 << 12)
    acc2 = BitCountAccumulator.zero(1, 16)
    acc2.add_bits(np.frombuffer(report.to_bytes(2, "little"), dtype=np.uint8)[None, :])
    assert np.flatnonzero(acc2.ones[0]).tolist() == [3, 12]


def test_k_not_multiple_of_8_rejects_unused_bits() -> None:
    acc = BitCountAccumulator.zero(1, 13)
    acc.add_bits(np.array([[0xFF, 0b0001_1111]], np.uint8))  # all 13 bits set
    assert acc.ones[0].tolist() == [1] * 13
    with pytest.raises(InvalidReportError, match="unused high bits"):
        acc.add_bits(np.array([[0, 0b0010_0000]], np.uint8))  # bit 13
    assert acc.n == 1


def test_bit_merge_equals_add_of_concatenation() -> None:
    rng = np.random.default_rng(3)
    m, k = 8, 40
    parts = [
        (_pack(rng.integers(0, 2, size=(n, k), dtype=np.uint8)), rng.integers(0, m, n).astype(np.uint32))
        for n in (10, 250, 1)
    ]
    accs = []
    for bits, coh in parts:
        a = BitCountAccumulator.zero(m, k)
        a.add_bits(bits, coh)
        accs.append(a)
    both = BitCountAccumulator.zero(m, k)
    both.add_bits(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    assert accs[0] + accs[1] + accs[2] == both
    total = BitCountAccumulator.zero(m, k)
    for a in accs:
        total += a
    assert total == both


@pytest.mark.parametrize(
    ("bits", "cohorts", "match"),
    [
        (np.zeros((3, 2), np.uint8), np.array([0, 1, 4], np.uint32), "cohort=4"),
        (np.zeros((3, 2), np.uint8), np.array([0, -1, 2]), "cohort=-1"),
        (np.zeros((3, 2), np.uint8), np.array([0, 1]), r"shape \(3,\)"),
        (np.zeros((3, 2), np.uint8), np.array([0.0, 1.0, 2.0]), "integer"),
        (np.zeros((3, 2), np.uint8), None, "cohort array"),
        (np.zeros((3, 3), np.uint8), np.array([0, 1, 2]), r"\(n, 2\)"),
        (np.zeros((3, 2), np.int64), np.array([0, 1, 2]), "uint8"),
        (np.zeros(6, np.uint8), np.array([0, 1, 2]), r"\(n, 2\)"),
    ],
)
def test_bits_reject_bad_batches_and_add_nothing(
    bits: np.ndarray, cohorts: np.ndarray | None, match: str
) -> None:
    acc = BitCountAccumulator.zero(4, 16)
    acc.add_bits(np.full((1, 2), 0xFF, np.uint8), np.array([2], np.uint32))
    before = acc.copy()
    with pytest.raises(InvalidReportError, match=match):
        acc.add_bits(bits, cohorts)
    assert acc == before


def test_bit_shape_mismatch_and_constructor() -> None:
    with pytest.raises(InvalidReportError, match="m=2, k=8"):
        _ = BitCountAccumulator.zero(2, 8) + BitCountAccumulator.zero(2, 9)
    with pytest.raises(InvalidReportError, match="at most cohort_reports"):
        BitCountAccumulator([1, 1], [[0, 2], [0, 0]])
    with pytest.raises(InvalidReportError, match="shape"):
        BitCountAccumulator([1, 1], [[0, 1]])
    with pytest.raises(InvalidReportError):
        BitCountAccumulator.zero(1, 4097)


# ---------------------------------------------------------------------------------------------- bytes


def _filled_accumulators() -> list[CountAccumulator | BitCountAccumulator]:
    rng = np.random.default_rng(5)
    c = CountAccumulator.zero(9)
    c.add_values(rng.integers(0, 9, size=500))
    b = BitCountAccumulator.zero(6, 21)
    b.add_bits(
        _pack(rng.integers(0, 2, size=(400, 21), dtype=np.uint8)), rng.integers(0, 6, 400).astype(np.uint32)
    )
    big = CountAccumulator(np.array([2**62, 0, 7], dtype=np.int64))
    return [c, b, big, CountAccumulator.zero(2), BitCountAccumulator.zero(1, 1)]


@pytest.mark.parametrize("idx", range(5))
def test_bytes_round_trip(idx: int) -> None:
    acc = _filled_accumulators()[idx]
    data = acc.to_bytes()
    assert data[:4] == b"LDPA"
    assert type(acc).from_bytes(data) == acc
    assert accumulator_from_bytes(data) == acc
    assert accumulator_from_bytes(bytearray(data)) == acc
    assert accumulator_from_bytes(memoryview(data)) == acc


def test_bytes_layout_is_pinned() -> None:
    acc = CountAccumulator(np.array([3, 1], dtype=np.int64))
    body = b"LDPA" + bytes([1, 1]) + (1).to_bytes(2, "little") + (2).to_bytes(8, "little")
    body += (3).to_bytes(8, "little") + (1).to_bytes(8, "little")
    assert acc.to_bytes() == body + zlib.crc32(body).to_bytes(4, "little")


def _reseal(body: bytes) -> bytes:
    """Recompute the checksum so that a test reaches the check after it."""
    return body + struct.pack("<I", zlib.crc32(body))


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d[:10], "length"),
        (lambda d: d[:-1], "crc32"),
        (lambda d: d[:30] + bytes([d[30] ^ 0x01]) + d[31:], "crc32"),
        (lambda d: _reseal(b"XXXX" + d[4:-4]), "magic"),
        (lambda d: _reseal(d[:4] + bytes([2]) + d[5:-4]), "version"),
        (lambda d: _reseal(d[:5] + bytes([9]) + d[6:-4]), "kind"),
        (lambda d: _reseal(d[:6] + (2).to_bytes(2, "little") + d[8:-4]), "ndim"),
        (lambda d: _reseal(d[:-12]), "payload length"),
        (lambda d: _reseal(d[:-12] + (-1).to_bytes(8, "little", signed=True)), "non-negative"),
        (lambda d: _reseal(d[:8] + (0).to_bytes(8, "little") + d[16:-4]), "size"),
        (lambda d: b"", "length"),
    ],
)
def test_corrupt_count_bytes_are_rejected(mutate: object, match: str) -> None:
    data = CountAccumulator(np.array([5, 6, 7], dtype=np.int64)).to_bytes()
    bad = mutate(data)  # type: ignore[operator]
    with pytest.raises(CorruptAccumulatorError, match=match):
        CountAccumulator.from_bytes(bad)
    with pytest.raises(ValueError):  # also a ValueError for generic callers
        accumulator_from_bytes(bad)


def test_corrupt_bit_bytes_are_rejected() -> None:
    acc = BitCountAccumulator(np.array([2, 3]), np.array([[1, 2], [3, 0]]))
    data = acc.to_bytes()
    assert BitCountAccumulator.from_bytes(data) == acc
    # ones[1, 0] = 4 > cohort_reports[1] = 3, with a valid checksum.
    body = bytearray(data[:-4])
    payload_start = len(body) - 8 * 6
    body[payload_start + 8 * 4 : payload_start + 8 * 5] = (4).to_bytes(8, "little")
    with pytest.raises(CorruptAccumulatorError, match="ones"):
        BitCountAccumulator.from_bytes(_reseal(bytes(body)))
    with pytest.raises(CorruptAccumulatorError, match="kind"):
        CountAccumulator.from_bytes(data)
    with pytest.raises(CorruptAccumulatorError, match="kind"):
        BitCountAccumulator.from_bytes(CountAccumulator.zero(2).to_bytes())
    with pytest.raises(CorruptAccumulatorError, match="bytes"):
        BitCountAccumulator.from_bytes("not bytes")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- params


def _all_params() -> list[object]:
    return [
        BinaryRRParams.two_coin(),
        GRRParams(domain=["a", "b", "c"], truth_probability=0.5),
        RapporParams(k=20, h=2, m=3),
        BasicRapporParams(domain=5),
        BooleanRapporParams(),
    ]


def test_accumulator_for_shapes() -> None:
    shapes = []
    for params in _all_params():
        acc = accumulator_for(params)  # type: ignore[arg-type]
        check_matches(acc, params)  # type: ignore[arg-type]
        assert acc.n == 0
        shapes.append(acc.counts.shape if isinstance(acc, CountAccumulator) else acc.ones.shape)
    assert shapes == [(2,), (3,), (3, 20), (1, 5), (1, 1)]


def test_add_columns_dispatch() -> None:
    rr, grr, rappor, basic, boolean = _all_params()
    a = accumulator_for(rr)  # type: ignore[arg-type]
    add_columns(a, rr, np.array([True, False, True]))  # type: ignore[arg-type]
    assert isinstance(a, CountAccumulator)
    assert a.counts.tolist() == [1, 2]  # index 0 = "no", 1 = "yes"

    g = accumulator_for(grr)  # type: ignore[arg-type]
    add_columns(g, grr, np.array([2, 2, 0], dtype=np.int64))  # type: ignore[arg-type]
    assert isinstance(g, CountAccumulator)
    assert g.counts.tolist() == [1, 0, 2]

    r = accumulator_for(rappor)  # type: ignore[arg-type]
    bits = _pack(np.eye(20, dtype=np.uint8)[[0, 19, 19]])
    add_columns(r, rappor, (np.array([0, 2, 2], np.uint32), bits))  # type: ignore[arg-type]
    assert isinstance(r, BitCountAccumulator)
    assert r.cohort_reports.tolist() == [1, 0, 2]
    assert r.ones[0, 0] == 1 and r.ones[2, 19] == 2 and r.ones.sum() == 3

    b = accumulator_for(basic)  # type: ignore[arg-type]
    add_columns(b, basic, _pack(np.eye(5, dtype=np.uint8)[[4, 4, 1]]))  # type: ignore[arg-type]
    assert isinstance(b, BitCountAccumulator)
    assert b.ones[0].tolist() == [0, 1, 0, 0, 2]

    bo = accumulator_for(boolean)  # type: ignore[arg-type]
    add_columns(bo, boolean, np.array([[1], [0], [1]], np.uint8))  # type: ignore[arg-type]
    assert isinstance(bo, BitCountAccumulator)
    assert (bo.n, int(bo.ones[0, 0])) == (3, 2)


def test_add_columns_rejects_mismatches() -> None:
    rr, grr, rappor, _, _ = _all_params()
    with pytest.raises(InvalidReportError, match="bool"):
        add_columns(accumulator_for(rr), rr, np.array([0, 1]))  # type: ignore[arg-type]
    with pytest.raises(InvalidReportError, match="integer"):
        add_columns(accumulator_for(grr), grr, np.array([True]))  # type: ignore[arg-type]
    with pytest.raises(InvalidReportError, match="accumulator"):
        add_columns(CountAccumulator.zero(4), grr, np.array([0]))  # type: ignore[arg-type]
    with pytest.raises(InvalidReportError, match="accumulator"):
        add_columns(CountAccumulator.zero(2), rappor, np.array([0]))  # type: ignore[arg-type]
    with pytest.raises(InvalidReportError, match="tuple"):
        add_columns(accumulator_for(rappor), rappor, np.zeros((1, 3), np.uint8))  # type: ignore[arg-type]
    with pytest.raises(InvalidReportError, match="values=3"):
        add_columns(accumulator_for(grr), grr, np.array([3]))  # type: ignore[arg-type]


# --- batch_delta / BitRows: the increment of a tiny bit-count batch, without an (m, k) temporary ---------


@pytest.mark.parametrize("n", [1, 5, 16])
def test_batch_delta_rows_add_what_the_dense_path_adds(n: int) -> None:
    params = RapporParams(k=13, h=2, m=4)
    rng = np.random.default_rng(n)
    bits01 = rng.integers(0, 2, size=(n, 13))
    cohorts = np.array([2, 0, 2, 3, 2] * 4, dtype=np.uint32)[:n]  # repeated cohorts
    cols = (cohorts, _pack(bits01))
    delta = batch_delta(params, cols)
    assert isinstance(delta, BitRows) and delta.n == n
    dense = accumulator_for(params)
    add_columns(dense, params, cols)
    base = accumulator_for(params)
    add_columns(base, params, (np.array([1], dtype=np.uint32), _pack(np.ones((1, 13)))))
    before = base.copy()
    assert base + delta == base + dense  # a new object ...
    assert base == before  # ... leaving the committed one unchanged
    base += delta
    assert base == before + dense
    assert base.ones.sum() == before.ones.sum() + bits01.sum()


@pytest.mark.parametrize(
    "params", [BasicRapporParams(domain=["a", "b", "c"]), BooleanRapporParams()], ids=["basic", "boolean"]
)
def test_batch_delta_rows_for_one_cohort_mechanisms(params: BasicRapporParams | BooleanRapporParams) -> None:
    k = 3 if isinstance(params, BasicRapporParams) else 1
    bits = _pack(np.array([[1, 0, 1][:k], [0, 1, 1][:k]]))
    delta = batch_delta(params, bits)
    assert isinstance(delta, BitRows) and (delta.m, delta.k, delta.n) == (1, k, 2)
    dense = accumulator_for(params)
    add_columns(dense, params, bits)
    assert accumulator_for(params) + delta == dense


def test_batch_delta_sums_larger_batches_and_other_mechanisms() -> None:
    params = RapporParams(k=8, h=2, m=2)
    cols = (np.zeros(17, dtype=np.uint32), _pack(np.ones((17, 8))))
    delta = batch_delta(params, cols)
    assert isinstance(delta, BitCountAccumulator) and delta.n == 17
    grr = GRRParams(domain=["a", "b", "c"], truth_probability=0.5)
    assert isinstance(batch_delta(grr, np.array([0, 2, 2])), CountAccumulator)


def test_batch_delta_rejects_bad_reports_and_a_foreign_shape() -> None:
    params = RapporParams(k=5, h=2, m=4)
    with pytest.raises(InvalidReportError, match="cohort"):
        batch_delta(params, (np.array([4], dtype=np.uint32), _pack(np.ones((1, 5)))))
    with pytest.raises(InvalidReportError, match="index >= k"):
        batch_delta(params, (np.array([0], dtype=np.uint32), np.array([[0b100000]], dtype=np.uint8)))
    with pytest.raises(InvalidReportError, match="tuple"):
        batch_delta(params, _pack(np.ones((1, 5))))
    rows = batch_delta(params, (np.array([1], dtype=np.uint32), _pack(np.ones((1, 5)))))
    other = accumulator_for(RapporParams(k=6, h=2, m=4))
    before = other.copy()
    with pytest.raises(InvalidReportError, match="m=4, k=5"):
        other += rows
    assert other == before  # nothing added
    with pytest.raises(InvalidReportError, match="at most 16"):
        BitRows(4, 5, _pack(np.ones((17, 5))), np.zeros(17, dtype=np.uint32))


# ----------------------------------------------------------- issue 14: the layout table of the registry


def test_layout_table_creates_and_feeds_each_layout() -> None:
    from ldp_aggregator.accumulators import LAYOUT_ACCUMULATORS
    from ldp_aggregator.support import SupportCountAccumulator
    from ldp_client.spec import LAYOUT_SUMS

    assert set(LAYOUT_ACCUMULATORS) == set(LAYOUT_SUMS) == {"counts", "bits", "support", "moments", "paired"}
    counts_cls = LAYOUT_ACCUMULATORS["counts"]
    counts = counts_cls.of_shape((4,))
    counts.add_batch(np.array([0, 3, 3]))
    assert counts == CountAccumulator(np.array([1, 0, 0, 2])) == counts_cls.from_sums(np.array([1, 0, 0, 2]))
    assert counts.layout_shape == (4,)
    assert counts_cls.delta_of((4,), np.array([3])) == CountAccumulator(np.array([0, 0, 0, 1]))

    bits_cls = LAYOUT_ACCUMULATORS["bits"]
    rows = np.packbits(np.array([[1, 0, 1], [0, 1, 1]], dtype=np.uint8), axis=1, bitorder="little")
    cohorts = np.array([1, 0])
    bits = bits_cls.of_shape((2, 3))
    bits.add_batch((cohorts, rows))
    expected = BitCountAccumulator.zero(2, 3)
    expected.add_bits(rows, cohorts)
    assert bits == expected == bits_cls.from_sums((expected.cohort_reports, expected.ones))
    assert bits.layout_shape == (2, 3)
    small = bits_cls.delta_of((2, 3), (cohorts, rows))
    assert isinstance(small, BitRows)  # a tiny batch: rows, no (m, k) temporary
    assert BitCountAccumulator.zero(2, 3) + small == expected
    many = bits_cls.delta_of((2, 3), (np.tile(cohorts, 20), np.tile(rows, (20, 1))))
    assert isinstance(many, BitCountAccumulator) and many.n == 40

    support_cls = LAYOUT_ACCUMULATORS["support"]
    support = support_cls.of_shape((3,))
    support.add_batch((5, np.array([1, 5, 0])))
    assert support == SupportCountAccumulator(5, np.array([1, 5, 0])) == support_cls.from_sums((5, [1, 5, 0]))
    assert support.layout_shape == (3,) and support_cls.delta_of((3,), (2, np.array([0, 1, 2]))).n == 2

    # moments (numeric mechanisms): 2 attributes, codes in [0, 10), code 9 counted apart; 2 users.
    moments_cls = LAYOUT_ACCUMULATORS["moments"]
    moments = moments_cls.of_shape((2, 10, 9))
    moments.add_batch((np.array([1, 9, 3]), np.array([0, 0, 1]), 2))
    assert moments == MeanAccumulator(
        attributes=2, num_codes=10, special_codes=(9,), users=2, counts=[1, 1], s1=[1, 3], s2=[1, 9],
        special_counts=[[1], [0]],
    )  # fmt: skip
    assert moments == moments_cls.from_sums(((2, 10, 9), 2, [1, 1], [1, 3], [1, 9], [[1], [0]]))
    assert moments.layout_shape == (2, 10, 9)
    assert moments_cls.delta_of((1, 4), (np.array([3]), None, None)).n == 1

    # The paired layout is a composite: its sides' accumulators and the joint pattern counts (issue 14).
    paired_cls = LAYOUT_ACCUMULATORS["paired"]
    paired = paired_cls.of_parts((counts_cls.of_shape((2,)), bits_cls.of_shape((1, 3))), (2, 8))  # type: ignore[attr-defined]
    side_rows = np.packbits(np.array([[1, 0, 1], [0, 0, 1]], dtype=np.uint8), axis=1, bitorder="little")
    paired.add_batch((np.array([1, 0]), (None, side_rows), lambda: np.array([1 * 8 + 5, 0 * 8 + 4])))
    assert paired.n == 2 and paired.layout_shape == (2, 8) and paired.joint[1, 5] == paired.joint[0, 4] == 1
    assert paired.layout_parts[0] == CountAccumulator(np.array([1, 1]))
    assert paired_cls.from_sums((paired.first, paired.second, paired.joint)) == paired
    with pytest.raises(InvalidParameterError):  # a composite is made of its parts, not of a shape
        paired_cls.of_shape((2, 8))
    shapes = {"counts": (3,), "bits": (2, 3), "support": (3,), "moments": (1, 4)}
    for name, cls in LAYOUT_ACCUMULATORS.items():  # the view fields are the accumulators' attributes
        acc = paired if name == "paired" else cls.of_shape(shapes[name])
        assert all(hasattr(acc, field) for field in LAYOUT_SUMS[name])  # type: ignore[index]


def test_registered_mechanism_accumulators_come_from_their_layout() -> None:
    from ldp_aggregator.accumulators import accumulator_from_sums, accumulator_nbytes

    grr = GRRParams.from_epsilon(5, 1.0)
    assert accumulator_for(grr) == CountAccumulator.zero(5)
    assert accumulator_nbytes(grr) == 8 * 5 + 64
    assert accumulator_from_sums(grr, np.array([1, 2, 3, 4, 5])).n == 15
    with pytest.raises(InvalidReportError) as info:
        accumulator_from_sums(grr, np.array([1, 2]))
    assert info.value.field == "accumulator" and "CountAccumulator of shape (5,)" in info.value.allowed
    with pytest.raises(InvalidReportError) as info:
        check_matches(BitCountAccumulator.zero(1, 2), BinaryRRParams.two_coin())
    assert info.value.value == "BitCountAccumulator of shape (1, 2)"
    assert info.value.allowed == "a CountAccumulator of shape (2,) for mechanism 'rr'"
    with pytest.raises(InvalidReportError) as info:
        add_columns(CountAccumulator.zero(2), BinaryRRParams.two_coin(), np.array([0, 1]))
    assert info.value.field == "reports" and "bool" in info.value.allowed
