"""TreeHist for every layer: the wire codec, the journal rows and :data:`SPEC` (the method: the package
docstring)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Final

from ldp_client._prob import PROB_ONE
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.codecs import U64_LE, RowField, as_array, as_int, check_count, check_indices, check_length
from ldp_client.errors import DomainError, InvalidReportError
from ldp_client.mechanisms.pem.core import _U16_LE, Prefix, level_candidates, prefix_of, value_bytes
from ldp_client.mechanisms.pem.spec import PrefixTreeSpec
from ldp_client.mechanisms.treehist.core import (
    _FIELDS,
    MAX_HADAMARD_BITS,
    TreeHistEncoder,
    TreeHistParams,
    TreeHistReport,
    _from_bytes,
    _label_digests,
    _make,
    direct_support,
    group_of,
    hadamard_answer,
    hadamard_support_table,
    level_digest,
)
from ldp_client.spec import Layout, Support, WireNames

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ldp_client._proto.ldp.v1 import reports_pb2
    from ldp_client.secret import ClientSecret

__all__ = ["SPEC", "TreeHistSpec"]

_PARAM_FIELDS: Final = (*_FIELDS, "truth_probability")


def _report_value(field: str, report: object, params: TreeHistParams) -> tuple[int, tuple[int, ...], int]:
    missing = object()
    parts = [getattr(report, name, missing) for name in ("group", "rows", "answer")]
    if any(p is missing for p in parts):
        raise InvalidReportError(field, report, "a TreeHistReport(group, rows, answer)")
    top = params.groups - 1
    group = as_int(f"{field}.group", parts[0], f"a group in [0, {top}]")
    if not 0 <= group <= top:
        raise InvalidReportError(f"{field}.group", group, f"a group in [0, {top}]")
    t = params.hadamard_bits
    rows = parts[1]
    if not isinstance(rows, tuple | list) or len(rows) != t:
        raise InvalidReportError(f"{field}.rows", rows, f"{t} integers in [0, 2**64)")
    checked = tuple(as_int(f"{field}.rows[{k}]", r, "an integer in [0, 2**64)") for k, r in enumerate(rows))
    for k, r in enumerate(checked):
        if not 0 <= r < 1 << 64:
            raise InvalidReportError(f"{field}.rows[{k}]", r, "an integer in [0, 2**64)")
    y = as_int(f"{field}.answer", parts[2], f"an answer in [0, {params.g - 1}]")
    if not 0 <= y < params.g:
        raise InvalidReportError(f"{field}.answer", y, f"an answer in [0, {params.g - 1}]")
    return group, checked, y


def _check_columns(columns: object, params: TreeHistParams, field: str) -> tuple[Any, Any, Any]:
    import numpy as np

    if not isinstance(columns, tuple) or len(columns) != 3:
        raise InvalidReportError(field, type(columns).__name__, "a (groups, rows, answers) tuple of arrays")
    groups = as_array(f"{field}.groups", columns[0], "integer groups", 1)
    rows = as_array(f"{field}.rows", columns[1], "uint64 rows", 2)
    y = as_array(f"{field}.answers", columns[2], "integer answers", 1)
    n, t = groups.shape[0], params.hadamard_bits
    if rows.dtype != np.uint64 or rows.shape != (n, t):
        raise InvalidReportError(f"{field}.rows", f"{rows.dtype}{rows.shape}", f"uint64 of shape ({n}, {t})")
    for name, arr in (("groups", groups), ("answers", y)):
        if not np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_ or arr.shape[0] != n:
            raise InvalidReportError(
                f"{field}.{name}", f"{arr.dtype}{arr.shape}", f"integers of shape ({n},)"
            )
    check_indices(groups, params.groups, f"{field}.groups", "a group")
    check_indices(y, params.g, f"{field}.answers", "an answer")
    return groups, rows, y


def _sample_rows(t: int) -> tuple[tuple[int, ...], ...]:
    """A fixed sample of row tuples for the exhaustive checks (public randomness independent of the value:
    the distribution conditioned on it)."""
    return tuple(
        tuple(
            _from_bytes(hashlib.sha256(b"ldp-treehist-test-row" + bytes((i, k))).digest()[:8], "little")
            for k in range(t)
        )
        for i in range(6)
    )


class TreeHistSpec(PrefixTreeSpec[TreeHistParams]):
    """TreeHist for every layer (:mod:`ldp_client.spec`; package docstring).

    Wire: ``Campaign.treehist`` (``TreeHistParams``); batch columns ``groups`` (u16), ``rows`` (t u64 per
    report), ``answers`` (u16) of ``ReportBatch.treehist``; ``Report.treehist`` one (group, rows, answer).
    Journal row: u16 group, t u64 rows, u16 answer. Accumulator: ``counts`` of reports per group; the
    discovery reads the raw reports.
    """

    name: ClassVar[str] = TreeHistParams.name
    params_type: ClassVar[type[Any]] = TreeHistParams
    wire: ClassVar[WireNames] = WireNames(campaign="treehist", batch="treehist", report="treehist")
    param_fields: ClassVar[tuple[str, ...]] = _PARAM_FIELDS
    params_message: ClassVar[Any] = campaign_pb2.TreeHistParams

    def _make(self, *, epsilon: float | None, fields: dict[str, object]) -> TreeHistParams:
        return _make(epsilon=epsilon, fields=fields)

    def _device_encoder(
        self, params: TreeHistParams, campaign_id: str, secret: ClientSecret
    ) -> Callable[[Any], Any]:
        return TreeHistEncoder(params, group=group_of(params, campaign_id, secret)).encode

    # -------------------------------------------------------------------------------- codec

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: TreeHistParams, columns: Any) -> None:
        groups, rows, y = _check_columns(columns, params, self.wire.batch)
        n = groups.shape[0]
        check_count("count", n)
        msg.count = n
        cols = msg.treehist
        cols.groups = groups.astype(_U16_LE).tobytes()
        cols.rows = rows.astype(U64_LE).tobytes()
        cols.answers = y.astype(_U16_LE).tobytes()

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: TreeHistParams, n: int) -> Any:
        import numpy as np

        field, cols, t = self.wire.batch, msg.treehist, params.hadamard_bits
        check_length(f"{field}.groups", cols.groups, 2 * n, f"2 * count for count={n} little-endian uint16")
        check_length(
            f"{field}.rows", cols.rows, 8 * t * n, f"8 * {t} * count for count={n} little-endian uint64"
        )
        check_length(f"{field}.answers", cols.answers, 2 * n, f"2 * count for count={n} little-endian uint16")
        groups = np.frombuffer(cols.groups, dtype=_U16_LE)
        check_indices(groups, params.groups, f"{field}.groups", "a group")
        answers = np.frombuffer(cols.answers, dtype=_U16_LE)
        check_indices(answers, params.g, f"{field}.answers", "an answer")
        return (
            groups.astype(np.uint16, copy=False),
            np.frombuffer(cols.rows, dtype=U64_LE).astype(np.uint64, copy=False).reshape(n, t),
            answers.astype(np.uint16, copy=False),
        )

    def report_to_proto(self, msg: reports_pb2.Report, params: TreeHistParams, output: Any) -> None:
        group, rows, y = _report_value("report", output, params)
        target = msg.treehist
        target.group, target.answer = group, y
        target.rows[:] = rows

    def report_from_proto(self, msg: reports_pb2.Report, params: TreeHistParams) -> Any:
        import numpy as np

        r = msg.treehist
        if r.group >= params.groups:
            raise InvalidReportError("treehist.group", r.group, f"a group in [0, {params.groups - 1}]")
        if len(r.rows) != params.hadamard_bits:
            raise InvalidReportError(
                "treehist.rows", f"{len(r.rows)} rows", f"{params.hadamard_bits} rows (hadamard_bits)"
            )
        if r.answer >= params.g:
            raise InvalidReportError("treehist.answer", r.answer, f"an answer in [0, {params.g - 1}]")
        return (
            np.array([r.group], dtype=np.uint16),
            np.array([list(r.rows)], dtype=np.uint64),
            np.array([r.answer], dtype=np.uint16),
        )

    def batch_from_reports(self, params: TreeHistParams, reports: Sequence[Any]) -> Any:
        import numpy as np

        checked = [_report_value(f"reports[{i}]", r, params) for i, r in enumerate(reports)]
        return (
            np.array([r[0] for r in checked], dtype=np.uint16),
            np.array([r[1] for r in checked], dtype=np.uint64).reshape(len(checked), params.hadamard_bits),
            np.array([r[2] for r in checked], dtype=np.uint16),
        )

    def row_fields(self, params: TreeHistParams) -> tuple[RowField, ...]:
        f = self.wire.batch
        return (
            RowField((f, "groups"), 2),
            RowField((f, "rows"), 8 * params.hadamard_bits),
            RowField((f, "answers"), 2),
        )

    def row_packer(self, params: TreeHistParams) -> Callable[[Any], bytes]:
        def pack(r: TreeHistReport) -> bytes:
            body = b"".join(w.to_bytes(8, "little") for w in r.rows)
            return r.group.to_bytes(2, "little") + body + r.answer.to_bytes(2, "little")

        return pack

    def row_unpacker(self, params: TreeHistParams) -> Callable[[bytes], Any]:
        t = params.hadamard_bits

        def unpack(row: bytes) -> TreeHistReport:
            rows = tuple(_from_bytes(row[2 + 8 * k : 10 + 8 * k], "little") for k in range(t))
            return TreeHistReport(
                _from_bytes(row[:2], "little"), rows, _from_bytes(row[2 + 8 * t :], "little")
            )

        return unpack

    # --------------------------------------------------------------------------- simulation

    def encode_batch(
        self,
        params: TreeHistParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        """Simulated users (seeded ``rng`` only): a uniform group each (what their secrets give), t uniform
        rows, the true answer A D kept w.p. p else a uniform other answer, vectorised."""
        import numpy as np

        from ldp_client.mechanisms._batchbits import raw_words

        idx = np.asarray(values, dtype=np.int64)
        if idx.ndim != 1 or (idx.size and (int(idx.min()) < 0 or int(idx.max()) >= len(labels))):
            raise DomainError("values", f"shape {idx.shape}", f"indices into the {len(labels)} labels")
        table = _label_digests(params, tuple(labels))
        n, t = idx.shape[0], params.hadamard_bits
        groups = rng.integers(0, params.groups, size=n, dtype=np.int64)
        digests = table[idx, groups]
        rows = raw_words(rng, n * t).astype(np.uint64).reshape(n, t)
        own = np.zeros(n, dtype=np.int64)
        for k in range(t):
            own |= (np.bitwise_count(rows[:, k] & digests) & np.uint8(1)).astype(np.int64) << k
        truthful = rng.integers(0, PROB_ONE, size=n, dtype=np.uint32) < np.uint32(params.truth_threshold)
        other = np.asarray(rng.integers(0, params.g - 1, size=n, dtype=np.int64))
        other = other + (other >= own)
        answers = np.where(truthful, own, other).astype(np.uint16)
        return groups.astype(np.uint16), rows, answers

    # ------------------------------------------------------------------------------- server

    def layout(self, params: TreeHistParams) -> Layout:
        return Layout.counts(params.groups)

    def layout_batch(self, params: TreeHistParams, columns: Any) -> Any:
        groups, _rows, _y = _check_columns(columns, params, "reports")
        return groups.astype("int64")

    def discovery_levels(self, params: TreeHistParams) -> int:
        return params.groups

    def discovery_candidates(
        self, params: TreeHistParams, level: int, kept: Sequence[Hashable]
    ) -> tuple[Hashable, ...]:
        if level == params.levels:  # verification: the values the last discovery level kept
            return tuple(Prefix(*p) for p in kept)  # type: ignore[misc]
        return level_candidates(params, level, [Prefix(*p) for p in kept])  # type: ignore[misc]

    def discovery_support(
        self, params: TreeHistParams, columns: Any, level: int, candidates: Sequence[Hashable]
    ) -> Support:
        """A discovery level: every m-bit digest's support from one Walsh-Hadamard transform of the
        group's reports, read at the candidates' digests. The verification level: its few candidates'
        64-bit digests tested report by report."""
        import numpy as np

        groups, rows, y = _check_columns(columns, params, "reports")
        mine = groups == level
        digests = np.array(
            [level_digest(params, level, Prefix(*c)) for c in candidates],  # type: ignore[misc]
            dtype=np.uint64,
        )
        if not mine.any():  # no reports at this level: nothing supports anything (no transform to build)
            counts = np.zeros(len(candidates), dtype=np.int64)
        elif level == params.levels:
            counts = direct_support(rows[mine], y[mine], digests)
        else:
            table = hadamard_support_table(rows[mine], y[mine], params.hash_bits)
            counts = table[digests.astype(np.int64)]
        return Support(
            labels=tuple(str(i) for i in range(len(candidates))),
            counts=counts,
            n=int(np.count_nonzero(mine)),
            p_star=params.p_star,
            q_star=params.q_star,
        )

    # ------------------------------------------------------------------------------- tests

    def examples(self) -> tuple[TreeHistParams, ...]:
        return (
            TreeHistParams(
                max_length=1,
                start_bits=4,
                step_bits=4,
                top_k=3,
                hadamard_bits=1,
                hash_bits=8,
                truth_probability=0.7,
            ),
            TreeHistParams(
                max_length=2,
                start_bits=3,
                step_bits=5,
                top_k=4,
                hadamard_bits=2,
                hash_bits=10,
                truth_probability=0.6,
            ),
            TreeHistParams.from_epsilon(2.0, max_length=3, top_k=4, step_bits=8, hash_bits=12),
        )

    def largest(self) -> tuple[TreeHistParams, ...]:
        """Every size at its largest: 64-byte values, 64 x 2**10 level-0 candidates (the level budget),
        12-bit steps (44 groups), t = 10 answer bits and 2**24-entry transforms."""
        return (
            TreeHistParams(
                max_length=64,
                start_bits=10,
                step_bits=12,
                top_k=16,
                hadamard_bits=10,
                hash_bits=24,
                truth_probability=0.5,
            ),
        )

    def exact_outputs(self, params: TreeHistParams, value: Any) -> Mapping[Hashable, Fraction]:
        """Over the device's group (uniform over secrets) and a fixed sample of rows: the distribution
        conditioned on the row sample (public randomness independent of the value)."""
        data = value_bytes(params, value)
        samples = _sample_rows(params.hadamard_bits)
        weight = Fraction(1, params.groups * len(samples))
        out: dict[Hashable, Fraction] = {}
        for group in range(params.groups):
            digest = level_digest(params, group, prefix_of(params, group, data))
            for rows in samples:
                own = hadamard_answer(rows, digest)
                for y in range(params.g):
                    out[TreeHistReport(group, rows, y)] = weight * self._answer_probability(params, own, y)
        return out

    def exact_output_probability(self, params: TreeHistParams, value: Any, output: Any) -> Fraction:
        """P(output | value) given the output's group and rows (the group's own probability, 1/(G + 1), is
        the same for every value)."""
        if not isinstance(output, TreeHistReport) or not (
            0 <= output.group < params.groups
            and 0 <= output.answer < params.g
            and len(output.rows) == params.hadamard_bits <= MAX_HADAMARD_BITS
        ):
            return Fraction(0)
        data = value_bytes(params, value)
        digest = level_digest(params, output.group, prefix_of(params, output.group, data))
        own = hadamard_answer(output.rows, digest)
        return Fraction(1, params.groups) * self._answer_probability(params, own, output.answer)

    @staticmethod
    def _answer_probability(params: TreeHistParams, own: int, answer: int) -> Fraction:
        p = Fraction(params.truth_threshold, PROB_ONE)
        return p if answer == own else (1 - p) / (params.g - 1)


SPEC = TreeHistSpec()
"""TreeHist, as :mod:`ldp_client.registry` lists it."""
