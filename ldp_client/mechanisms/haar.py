"""Haar wavelets with Hadamard randomized response (``haar``, "HaarHRR"): range queries over D ordered values.

Method (Cormode, Kulkarni, Srivastava, "Answering range queries under local differential privacy", VLDB
2019, §5, the discrete Haar transform "DHT" with Hadamard randomized response per level). The domain is
padded to 2^h >= D leaves (h >= 1). The Haar tree has h coefficient levels: level l (1..h) has m_l =
2^(l-1) nodes; node j of level l covers the leaves [j 2^(h-l+1), (j+1) 2^(h-l+1)), its left half the first
2^(h-l) of them. A value x has, at level l, the coefficient vector e_{l}(x) in {0, +1, -1}^(m_l): zero but at
the node holding x, where it is +1 when x lies in the node's left half and -1 in its right half. The
population's coefficient theta_{l,j} (share scale) is the mean of e_{l,j}(x) over users: the share in the
node's left half minus the share in its right half. The leaves follow from the coefficients exactly:
f_x = 2^-h + sum_l s_l(x) theta_{l, node_l(x)} / 2^(h-l+1), s_l(x) = +-1 the side of x (the Haar synthesis
from the known total 1: a node of mass M has children (M +- theta)/2), so any range is 2^-h |R| plus a
combination of at most 2 coefficients per level.

Client. Each device belongs to one level, uniform on 1..h and derived from its client secret
(HMAC-SHA256(secret, label || campaign id), as :mod:`ldp_client.mechanisms.hio` does), and for each value
reports (level, row, bit): a row r uniform on [0, m_l) (OS CSPRNG) and the true bit t = s_l(x) H[r, j]
(H the Sylvester-Hadamard matrix, H[r, j] = (-1)^popcount(r & j), j = node_l(x)) through Warner's
randomized response (:mod:`ldp_client.mechanisms.rr`, reused: truthful with probability a, else a fair
coin; P(report = t) = (1 + a)/2). This is CKS's HRR on the level's coefficient vector. epsilon is the
randomized response's, ln((1 + a)/(1 - a)): the level and the row are independent of the value.

Server. The ``support`` accumulator holds, level after level, the reports of each row (m_l counts) and
how many of them said +1 (m_l counts). With S_r = (+1 reports) - (-1 reports) at row r and n_l the
level's reports, theta_hat_l = H S / (n_l a) (a fast Walsh-Hadamard transform): each report contributes
H[r, j] b / a to node j, whose mean given the user is e_{l,j}(x) (the rows are uniform and H's rows
orthogonal), so theta_hat is unbiased; given the level's users, its nodes are uncorrelated with variance
(1/a^2 - pi_{l,j}) / n_l, pi_{l,j} the share of the level's users in node j. ``range_levels`` hands the
counts to :mod:`ldp_aggregator.haar_ranges` as :class:`ldp_client.layouts.HaarLevels`.

Importing this module does not import numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from ldp_client import randomness as _rnd
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.codecs import (
    U32_LE,
    RowField,
    as_array,
    as_int,
    check_count,
    check_indices,
    check_length,
    domain_from_proto,
    domain_to_proto,
)
from ldp_client.domain import (
    Domain,
    DomainLike,
    check_epsilon,
    no_more_fields,
    report_quantization,
    require_domain,
    take_field,
)
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.layouts import HaarLevels
from ldp_client.mechanisms.rr import BinaryRREncoder, BinaryRRParams, exact_channel
from ldp_client.spec import Kind, Layout, MakeArgs, MechanismSpec, SecretSource, Support, WireNames

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ldp_client._proto.ldp.v1 import reports_pb2
    from ldp_client.secret import ClientSecret

__all__ = ["SPEC", "HaarParams", "HaarReport", "HaarSpec", "coefficient_of", "level_of"]

LEVEL_LABEL = b"ldp-haar-level-v1:"
"""The HMAC message prefix of a device's level (followed by the campaign id, UTF-8)."""
MAX_HAAR_DOMAIN = 1 << 15
"""Bound on D (as hio's: an estimate lists the D values in one 4 MiB message)."""
_U16_LE = "<u2"


def _levels(d: int) -> int:
    """h = ceil(log2 d), at least 1."""
    return max(1, (d - 1).bit_length())


@dataclass(frozen=True, kw_only=True)
class HaarParams:
    """Haar wavelet coefficients with Hadamard randomized response (module docstring; CKS VLDB 2019, §5).

    Attributes:
        domain: the D ordered values (an integer domain 0..D-1, or labels in their order), 2 <= D <= 2^15.
        truth_probability: a, P(the randomized response answers truthfully; else a fair coin), in (0, 1);
            P(the reported bit is the true one) = (1 + a)/2, epsilon = ln((1 + a)/(1 - a)).
    """

    name: ClassVar[str] = "haar"
    domain: Domain
    truth_probability: float
    levels: int = field(init=False, repr=False, compare=False)
    rr: BinaryRRParams = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.domain, Domain):
            object.__setattr__(self, "domain", Domain.of(self.domain))
        d = self.domain.size
        if d > MAX_HAAR_DOMAIN:
            raise InvalidParameterError("domain", d, f"a domain of at most {MAX_HAAR_DOMAIN} ordered values")
        object.__setattr__(self, "levels", _levels(d))
        object.__setattr__(self, "rr", BinaryRRParams(truth_probability=self.truth_probability))

    @classmethod
    def from_epsilon(cls, domain: DomainLike, epsilon: float) -> HaarParams:
        """Warner's randomized response at ``epsilon`` (a = tanh(eps/2), rounded toward privacy)."""
        eps = check_epsilon(epsilon)
        rr = BinaryRRParams.from_epsilon(eps)
        params = cls(domain=Domain.of(domain), truth_probability=rr.truth_probability)
        report_quantization(eps, params.epsilon)
        return params

    @property
    def epsilon(self) -> float:
        """The randomized response's ln(P(1|1)/P(1|0)) = ln((1 + a)/(1 - a)), at the quantized a."""
        return self.rr.epsilon

    @property
    def bias(self) -> float:
        """E[reported bit (+-1) | true bit t] = a t: the quantized truth probability a."""
        return self.rr.p_yes_given_yes - self.rr.p_yes_given_no

    @property
    def leaves(self) -> int:
        """2^h, the leaves of the padded tree (>= D)."""
        return 1 << self.levels

    def level_sizes(self) -> tuple[int, ...]:
        """m_l = 2^(l-1) nodes (and Hadamard rows) for l = 1..h."""
        return tuple(1 << (level - 1) for level in range(1, self.levels + 1))


def _make(*, epsilon: float | None, domain: object, fields: dict[str, object]) -> HaarParams:
    dom = require_domain(domain, "haar")
    if epsilon is not None:
        no_more_fields(fields, "haar", ())
        return HaarParams.from_epsilon(dom, epsilon)
    tp = take_field(fields, "truth_probability", float, "haar") if "truth_probability" in fields else None
    no_more_fields(fields, "haar", ("truth_probability",))
    if tp is None:
        raise InvalidParameterError("params", sorted(fields), "epsilon, or truth_probability for haar")
    return HaarParams(domain=dom, truth_probability=tp)  # type: ignore[arg-type]


def level_of(params: HaarParams, campaign_id: str, secret: ClientSecret) -> int:
    """The device's level in [1, h]: 1 + (first 8 bytes of HMAC-SHA256(secret, LEVEL_LABEL || campaign id),
    big-endian) mod h. The modulo bias is below h / 2**64."""
    word = int.from_bytes(secret.prf(LEVEL_LABEL + campaign_id.encode("utf-8"))[:8], "big")
    return 1 + word % params.levels


def coefficient_of(params: HaarParams, level: int, index: int) -> tuple[int, bool]:
    """(node, left): the node of level ``level`` holding value index ``index`` and whether the index lies
    in its left half (coefficient +1) rather than its right half (-1)."""
    shift = params.levels - level
    return index >> (shift + 1), not (index >> shift) & 1


def hadamard_sign(row: int, node: int) -> bool:
    """H[row, node] = +1 (True) or -1 (False): (-1)^popcount(row & node)."""
    return not (row & node).bit_count() & 1


class HaarReport(NamedTuple):
    """One report: the device's level (1..h), the Hadamard row in [0, 2^(l-1)) and the bit (True: +1)."""

    level: int
    row: int
    bit: bool


class HaarEncoder:
    """The device's encoder: its level is fixed (from its secret); each value is reported as a uniform
    Hadamard row of the level (OS CSPRNG) and the randomized true bit (randomized response's encoder)."""

    __slots__ = ("_level", "_rr", "params")

    def __init__(self, params: HaarParams, *, level: int) -> None:
        if not isinstance(level, int) or isinstance(level, bool) or not 1 <= level <= params.levels:
            raise InvalidParameterError("level", level, f"an integer in [1, {params.levels}]")
        self.params = params
        self._level = level
        self._rr = BinaryRREncoder(params.rr)

    def encode(self, value: str | int) -> HaarReport:
        node, left = coefficient_of(self.params, self._level, self.params.domain.index(value))
        row = _rnd.randbelow(1 << (self._level - 1))
        truth = left == hadamard_sign(row, node)
        return HaarReport(self._level, row, self._rr.encode(truth))


# ------------------------------------------------------------------------------------------------ codec


def _report_value(field_name: str, report: object, params: HaarParams) -> tuple[int, int, bool]:
    missing = object()
    parts = [getattr(report, name, missing) for name in ("level", "row", "bit")]
    if any(p is missing for p in parts):
        raise InvalidReportError(field_name, report, "a HaarReport(level, row, bit)")
    allowed = f"a level in [1, {params.levels}]"
    level = as_int(f"{field_name}.level", parts[0], allowed)
    if not 1 <= level <= params.levels:
        raise InvalidReportError(f"{field_name}.level", level, allowed)
    bound = 1 << (level - 1)
    row = as_int(f"{field_name}.row", parts[1], f"a row in [0, {bound - 1}]")
    if not 0 <= row < bound:
        raise InvalidReportError(f"{field_name}.row", row, f"a row in [0, {bound - 1}] at level {level}")
    bit = parts[2]
    if isinstance(bit, bool):
        return level, row, bit
    b = as_int(f"{field_name}.bit", bit, "a bit, 0 or 1")
    if b not in (0, 1):
        raise InvalidReportError(f"{field_name}.bit", b, "a bit, 0 or 1")
    return level, row, bool(b)


def _pack_row(r: HaarReport) -> bytes:
    """The 7-byte journal row: u16 level, u32 row, u8 bit, little-endian."""
    return r.level.to_bytes(2, "little") + r.row.to_bytes(4, "little") + bytes([int(r.bit)])


def _unpack_row(row: bytes) -> HaarReport:
    return HaarReport(int.from_bytes(row[:2], "little"), int.from_bytes(row[2:6], "little"), bool(row[6]))


def _check_arrays(levels: Any, rows: Any, bits: Any, params: HaarParams, field_name: str) -> None:
    """Levels in [1, h], each row below its level's 2^(l-1), bits 0/1; vectorised over the batch."""
    import numpy as np

    if not levels.size:
        return
    lv = np.asarray(levels, dtype=np.int64)
    bad = (lv < 1) | (lv > params.levels)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InvalidReportError(f"{field_name}.levels", int(lv[i]), f"a level in [1, {params.levels}]")
    over = np.asarray(rows, dtype=np.int64) >= (np.int64(1) << (lv - 1))
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise InvalidReportError(
            f"{field_name}.rows",
            int(rows[i]),
            f"a row in [0, {(1 << (int(lv[i]) - 1)) - 1}] at level {int(lv[i])}",
        )
    b = np.asarray(bits)
    if b.dtype != np.bool_ and (b > 1).any():
        raise InvalidReportError(f"{field_name}.bits", int(b[np.flatnonzero(b > 1)[0]]), "a bit, 0 or 1")


def _check_columns(columns: object, params: HaarParams, field_name: str) -> tuple[Any, Any, Any]:
    import numpy as np

    if not isinstance(columns, tuple) or len(columns) != 3:
        raise InvalidReportError(field_name, type(columns).__name__, "a (levels, rows, bits) tuple of arrays")
    levels = as_array(f"{field_name}.levels", columns[0], "integer levels", 1)
    rows = as_array(f"{field_name}.rows", columns[1], "integer rows", 1)
    bits = as_array(f"{field_name}.bits", columns[2], "booleans", 1)
    n = levels.shape[0]
    for name, arr in (("levels", levels), ("rows", rows), ("bits", bits)):
        integral = np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_
        if not integral or arr.shape[0] != n or (name != "bits" and arr.dtype == np.bool_):
            raise InvalidReportError(
                f"{field_name}.{name}", f"{arr.dtype}{arr.shape}", f"integers of shape ({n},)"
            )
    check_indices(rows, 1 << 32, f"{field_name}.rows", "a row")
    check_indices(bits.astype(np.int64), 2, f"{field_name}.bits", "a bit")
    _check_arrays(levels, rows, bits, params, field_name)
    return levels, rows, bits.astype(np.bool_)


# ------------------------------------------------------------------------------------------------- spec


class HaarSpec(MechanismSpec[HaarParams]):
    """Haar wavelets with Hadamard randomized response for every layer (:mod:`ldp_client.spec`; module
    docstring).

    Wire: ``Campaign.haar`` (``HaarWaveletParams``); batch columns ``levels`` (u16), ``rows`` (u32),
    ``bits`` (u8) of ``ReportBatch.haar``; ``Report.haar`` one (level, row, bit). Journal row: u16 level,
    u32 row, u8 bit. Accumulator: ``support`` of, per level, the reports of each row then the +1 reports of
    each row (2 (2^h - 1) counts). Items: the D values; ranges through :meth:`range_levels`.
    """

    name: ClassVar[str] = HaarParams.name
    params_type: ClassVar[type[Any]] = HaarParams
    kind: ClassVar[Kind] = Kind.SUPPORT
    wire: ClassVar[WireNames] = WireNames(campaign="haar", batch="haar", report="haar")
    takes_domain: ClassVar[bool] = True
    per_device_state: ClassVar[bool] = True  # the level comes from the client secret: one client per user
    epsilon_field: ClassVar[str | None] = "truth_probability"

    def make(
        self, *, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]
    ) -> HaarParams:
        return _make(epsilon=epsilon, domain=domain, fields=dict(fields))

    def make_args(self, params: HaarParams) -> MakeArgs:
        dom = params.domain
        return MakeArgs(
            domain=dom.labels if dom.labels is not None else dom.size,
            fields={"truth_probability": params.truth_probability},
        )

    def params_to_proto(self, params: HaarParams) -> campaign_pb2.HaarWaveletParams:
        return campaign_pb2.HaarWaveletParams(
            domain=domain_to_proto(params.domain), truth_probability=params.truth_probability
        )

    def params_from_proto(self, msg: campaign_pb2.HaarWaveletParams) -> HaarParams:
        return HaarParams(domain=domain_from_proto(msg.domain), truth_probability=msg.truth_probability)

    def report_bits(self, params: HaarParams) -> int:
        """16 bits of level, the largest level's row (h - 1 bits) and the bit."""
        return 16 + params.levels - 1 + 1

    def needs_secret(self, params: HaarParams) -> bool:
        return True

    def encoder(
        self, params: HaarParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        if secret is None:
            raise InvalidParameterError(
                "secret", None, "the device's client secret (haar derives its level from it)"
            )
        key = secret if not callable(secret) else secret()
        return HaarEncoder(params, level=level_of(params, campaign_id, key)).encode

    # -------------------------------------------------------------------------------- codec

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: HaarParams, columns: Any) -> None:
        import numpy as np

        levels, rows, bits = _check_columns(columns, params, self.wire.batch)
        n = levels.shape[0]
        check_count("count", n)
        msg.count = n
        cols = msg.haar
        cols.levels = levels.astype(_U16_LE).tobytes()
        cols.rows = rows.astype(U32_LE).tobytes()
        cols.bits = bits.astype(np.uint8).tobytes()

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: HaarParams, n: int) -> Any:
        import numpy as np

        f, cols = self.wire.batch, msg.haar
        check_length(f"{f}.levels", cols.levels, 2 * n, f"2 * count for count={n} little-endian uint16")
        check_length(f"{f}.rows", cols.rows, 4 * n, f"4 * count for count={n} little-endian uint32")
        check_length(f"{f}.bits", cols.bits, n, f"count for count={n} bytes, each 0 or 1")
        levels = np.frombuffer(cols.levels, dtype=_U16_LE)
        rows = np.frombuffer(cols.rows, dtype=U32_LE)
        bits = np.frombuffer(cols.bits, dtype=np.uint8)
        _check_arrays(levels, rows, bits, params, f)
        return levels.astype(np.uint16), rows.astype(np.uint32), bits.astype(np.bool_)

    def report_to_proto(self, msg: reports_pb2.Report, params: HaarParams, output: Any) -> None:
        level, row, bit = _report_value("report", output, params)
        target = msg.haar
        target.level, target.row, target.bit = level, row, bit

    def report_from_proto(self, msg: reports_pb2.Report, params: HaarParams) -> Any:
        import numpy as np

        level, row, bit = _report_value("haar", msg.haar, params)
        return (
            np.array([level], dtype=np.uint16),
            np.array([row], dtype=np.uint32),
            np.array([bit], dtype=np.bool_),
        )

    def batch_from_reports(self, params: HaarParams, reports: Sequence[Any]) -> Any:
        import numpy as np

        rows = [_report_value(f"reports[{i}]", r, params) for i, r in enumerate(reports)]
        return (
            np.array([r[0] for r in rows], dtype=np.uint16),
            np.array([r[1] for r in rows], dtype=np.uint32),
            np.array([r[2] for r in rows], dtype=np.bool_),
        )

    def row_fields(self, params: HaarParams) -> tuple[RowField, ...]:
        f = self.wire.batch
        return (RowField((f, "levels"), 2), RowField((f, "rows"), 4), RowField((f, "bits"), 1))

    def row_packer(self, params: HaarParams) -> Callable[[Any], bytes]:
        return _pack_row

    def row_unpacker(self, params: HaarParams) -> Callable[[bytes], Any]:
        return _unpack_row

    # --------------------------------------------------------------------------- simulation

    def encode_batch(
        self,
        params: HaarParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        """Simulated users (seeded ``rng`` only): a uniform level each (what their secrets give), a uniform
        row of the level, the true bit s_l(x) H[row, node] and randomized response's batch encoder; all
        vectorised (popcount of row & node by bit folding)."""
        import numpy as np

        idx = np.asarray(values)
        d = params.domain.size
        if idx.ndim != 1 or (idx.size and (int(idx.min()) < 0 or int(idx.max()) >= d)):
            raise DomainError("values", f"shape {idx.shape}", f"a 1-D array of indices in [0, {d - 1}]")
        idx = idx.astype(np.int64, copy=False)
        n = idx.shape[0]
        levels = rng.integers(1, params.levels + 1, size=n, dtype=np.int64)
        rows = np.floor(rng.random(n) * (np.int64(1) << (levels - 1))).astype(np.int64)
        shift = params.levels - levels
        node = idx >> (shift + 1)
        left = ((idx >> shift) & 1) == 0
        truth = left == (_parity(rows & node) == 0)
        bits = BinaryRREncoder(params.rr).encode_batch(truth, rng)
        return levels.astype(np.uint16), rows.astype(np.uint32), bits

    # ------------------------------------------------------------------------------- server

    def layout(self, params: HaarParams) -> Layout:
        return Layout.support(2 * sum(params.level_sizes()))

    def layout_batch(self, params: HaarParams, columns: Any) -> Any:
        """(n, support): per level, a bincount of the rows, then of the rows of the +1 reports."""
        import numpy as np

        levels, rows, bits = _check_columns(columns, params, "reports")
        lv = np.asarray(levels, dtype=np.int64)
        r = np.asarray(rows, dtype=np.int64)
        parts = []
        for level, m in enumerate(params.level_sizes(), start=1):
            sel = lv == level
            parts.append(np.bincount(r[sel], minlength=m))
            parts.append(np.bincount(r[sel & bits], minlength=m))
        return int(lv.shape[0]), np.concatenate(parts).astype(np.int64)

    def items(self, params: HaarParams) -> tuple[str, ...]:
        dom = params.domain
        return tuple(dom.label(i) for i in range(dom.size))

    def input_value(self, params: HaarParams, index: int) -> Any:
        return params.domain.value(index)

    def support_rates(self, params: HaarParams) -> tuple[float, float]:
        """(1, 0): :meth:`support` hands the estimator estimated counts (count_hat = C)."""
        return 1.0, 0.0

    def support(self, params: HaarParams, acc: Any, candidates: Sequence[str] = ()) -> Support:
        """The D leaves as estimated counts n f_hat_x (the Haar synthesis, module docstring), with their
        variance (count scale) n^2 sum_l 4^-(h-l+1) (1/a^2 - theta_{l, node_l(x)}^2) / n_l: leaf x combines
        one coefficient per level with weight +-2^-(h-l+1); the oracle part (1/a^2 - pi)/n_l and the level
        subsets' sampling part (pi - theta^2)/n_l add up to it (``ldp_aggregator.haar_ranges``, step 4; the
        subtracted O(1/N) cross term of the sampling part is dropped, which errs on the wide side)."""
        import numpy as np

        lv = self.range_levels(params, acc)
        n_l = np.array([float(np.sum(r)) for r in lv.rows])
        d, n = params.domain.size, int(acc.n)
        if n == 0 or (n_l == 0).any():  # the estimator reports no reports; nothing to synthesise
            counts, var = np.zeros(d), np.zeros(d)
        else:
            thetas = coefficients(lv)
            leaves, _ = synthesize(thetas)
            counts = leaves[:d] * n
            per_leaf = np.zeros(params.leaves)
            for level, (theta, nl) in enumerate(zip(thetas, n_l, strict=True), start=1):
                width = 1 << (params.levels - level + 1)
                term = np.maximum(1.0 / lv.bias**2 - np.repeat(theta * theta, width), 0.0)
                per_leaf += term / (nl * float(width) ** 2)
            var = per_leaf[:d] * float(n) ** 2
        return Support(
            labels=self.items(params),
            counts=counts,
            n=n,
            p_star=1.0,
            q_star=0.0,
            extra_variance=var,
            estimated=True,
        )

    def range_levels(self, params: HaarParams, acc: Any) -> HaarLevels:
        rows, plus, start = [], [], 0
        for m in params.level_sizes():
            rows.append(acc.support[start : start + m])
            plus.append(acc.support[start + m : start + 2 * m])
            start += 2 * m
        return HaarLevels(
            labels=self.items(params),
            rows=tuple(rows),
            plus=tuple(plus),
            n=int(acc.n),
            bias=params.bias,
        )

    # ------------------------------------------------------------------------------- checks

    def examples(self) -> tuple[HaarParams, ...]:
        return (
            HaarParams(domain=Domain.of(4), truth_probability=0.5),
            HaarParams.from_epsilon(("low", "mid", "high"), math.log(3.0)),
            HaarParams(domain=Domain.of(8), truth_probability=0.25),
        )

    def largest(self) -> tuple[HaarParams, ...]:
        return (HaarParams(domain=Domain.of(MAX_HAAR_DOMAIN), truth_probability=0.5),)

    def exact_outputs(self, params: HaarParams, value: Any) -> Mapping[Hashable, Fraction]:
        """The level uniform on 1..h (a uniformly random secret), the row uniform on the level's 2^(l-1),
        then randomized response's exact channel on the true bit."""
        index = params.domain.index(value)
        channel = exact_channel(params.rr)
        out: dict[Hashable, Fraction] = {}
        for level in range(1, params.levels + 1):
            m = 1 << (level - 1)
            node, left = coefficient_of(params, level, index)
            for row in range(m):
                truth = int(left == hadamard_sign(row, node))
                for bit in (0, 1):
                    out[HaarReport(level, row, bool(bit))] = channel[truth][bit] / (params.levels * m)
        return out

    def exact_output_probability(self, params: HaarParams, value: Any, output: Any) -> Fraction:
        if not isinstance(output, HaarReport) or not 1 <= output.level <= params.levels:
            return Fraction(0)
        m = 1 << (output.level - 1)
        if not 0 <= output.row < m:
            return Fraction(0)
        node, left = coefficient_of(params, output.level, params.domain.index(value))
        truth = int(left == hadamard_sign(output.row, node))
        return exact_channel(params.rr)[truth][int(output.bit)] / (params.levels * m)


def fwht(x: NDArray[Any]) -> NDArray[np.float64]:
    """The Sylvester-Hadamard transform H x (length a power of two), H[r, j] = (-1)^popcount(r & j): the
    butterfly, log2(m) vectorised passes."""
    import numpy as np

    out = np.asarray(x, dtype=np.float64).copy()
    m, half = out.shape[0], 1
    while half < m:
        blocks = out.reshape(-1, 2, half)
        out = np.concatenate([blocks[:, :1] + blocks[:, 1:], blocks[:, :1] - blocks[:, 1:]], axis=1)
        out = out.reshape(-1)
        half *= 2
    return out


def coefficients(levels: HaarLevels) -> list[NDArray[np.float64]]:
    """theta_hat_l = H S_l / (n_l a) per level, S_l[r] = 2 plus_l[r] - rows_l[r] (module docstring).

    Raises:
        InvalidParameterError: a level has no report (its coefficients cannot be estimated).
    """
    import numpy as np

    out = []
    for level, (rows, plus) in enumerate(zip(levels.rows, levels.plus, strict=True), start=1):
        r = np.asarray(rows, dtype=np.float64)
        n_l = float(r.sum())
        if n_l <= 0:
            raise InvalidReportError(
                "n_reports", 0, f"at least one report at every level of the tree (level {level} has none)"
            )
        out.append(fwht(2.0 * np.asarray(plus, dtype=np.float64) - r) / (n_l * levels.bias))
    return out


def synthesize(
    thetas: Sequence[NDArray[np.float64]],
) -> tuple[NDArray[np.float64], list[NDArray[np.float64]]]:
    """(leaves, masses): the Haar synthesis from the known total 1, top-down: a node of mass M and
    coefficient theta has children (M + theta)/2 and (M - theta)/2; ``masses[l-1]`` are level l's node
    masses (2^(l-1) each), the leaves the 2^h shares."""
    import numpy as np

    mass = np.ones(1)
    masses = []
    for theta in thetas:
        masses.append(mass)
        mass = np.stack([(mass + theta) / 2.0, (mass - theta) / 2.0], axis=1).reshape(-1)
    return mass, masses


def _parity(x: NDArray[np.int64]) -> NDArray[np.int64]:
    """popcount(x) mod 2 elementwise (x < 2^32), by folding the bits onto the lowest."""
    y = x ^ (x >> 16)
    y = y ^ (y >> 8)
    y = y ^ (y >> 4)
    y = y ^ (y >> 2)
    y = y ^ (y >> 1)
    out: NDArray[np.int64] = y & 1
    return out


SPEC = HaarSpec()
"""Haar wavelets with Hadamard randomized response, as :mod:`ldp_client.registry` lists it."""
