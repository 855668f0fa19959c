"""Wang et al.'s multi-dimensional collection (ICDE 2019, Algorithm 4): k of D attributes per user.

D attributes, each in its own range. A user samples k of them uniformly without replacement
(k = max(1, min(D, floor(eps/2.5))) by default), reports each with a one-dimensional base mechanism
(``duchi``, ``piecewise`` or ``hybrid``, on positions: lo = 0, hi = 1) at eps/k, and the server scales by
D/k. epsilon = k times the base mechanism's (quantized) epsilon (sequential composition; which attributes
are sampled does not depend on the values).

A report is k ``(attribute, code)`` pairs with strictly increasing attributes (sorting makes the encoding
canonical: the order of sampling carries no information anyway). The per-report encoder reads k Lemire
words (Floyd's sampling of k distinct attributes, 4 bytes each) and then the base mechanism's bytes for
each attribute, in one CSPRNG call. Wire: ``Campaign.multidim`` (``lo``/``hi`` per attribute,
``out_of_range``, ``k`` and the base's message in its ``base`` oneof), ``ReportBatch.multidim``
(attributes and codes, n*k little-endian uint32 each), ``Report.multidim`` (``NumericPairs``). Journal
row: k pairs (u32 attribute, u32 code). Accumulator: ``moments`` of D attributes.

The base mechanisms are this module's own table (:data:`BASE_SPECS`, mirroring the proto oneof), not the
registry's, which imports this module.

Importing this module does not import numpy.
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Final

from ldp_client import randomness as _rnd
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.codecs import U32_LE, RowField, check_count, check_length
from ldp_client.errors import (
    DomainError,
    InvalidParameterError,
    InvalidReportError,
    PrivacyQuantizationWarning,
)
from ldp_client.mechanisms.numeric.base import (
    DEFAULT_CELLS,
    MAX_ATTRIBUTES,
    NumericLayout,
    OneDimEncoder,
    OutOfRange,
    as_float,
    as_int,
    check_epsilon,
    check_int,
    check_policy,
    check_range,
    check_rng,
    from_bytes,
    parse_ranges,
    position,
    positions,
    report_quantization,
    uniform_below,
)
from ldp_client.mechanisms.numeric.codec import (
    INT_FIELDS,
    POLICY_TO_PROTO,
    OneDimSpec,
    as_code_array,
    check_attributes,
    check_codes,
    moments_of,
    pack_pairs,
    pairs_value,
    policy_from_proto,
    unpack_pairs,
)
from ldp_client.mechanisms.numeric.duchi import SPEC as DUCHI_SPEC
from ldp_client.mechanisms.numeric.duchi import DuchiParams
from ldp_client.mechanisms.numeric.piecewise import HYBRID_SPEC, PIECEWISE_SPEC, HybridParams, PiecewiseParams
from ldp_client.spec import Kind, Layout, MakeArgs, MeanDesign, MechanismSpec, Moments, MomentsView, WireNames

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

    from ldp_client._proto.ldp.v1 import reports_pb2
    from ldp_client.domain import DomainLike
    from ldp_client.spec import SecretSource

__all__ = [
    "BASE_SPECS",
    "SPEC",
    "BaseParams",
    "MultidimEncoder",
    "MultidimParams",
    "MultidimSpec",
    "default_k",
]

BaseParams = DuchiParams | PiecewiseParams | HybridParams
BASE_SPECS: Final[tuple[OneDimSpec[Any], ...]] = (DUCHI_SPEC, PIECEWISE_SPEC, HYBRID_SPEC)
"""The base mechanisms multidim composes, in the order of the ``MultidimParams.base`` oneof."""
_BASE_BY_NAME: Final[dict[str, OneDimSpec[Any]]] = {s.name: s for s in BASE_SPECS}
_BASE_BY_TYPE: Final[dict[type, OneDimSpec[Any]]] = {s.params_type: s for s in BASE_SPECS}
_BASE_BY_MEMBER: Final[dict[str, OneDimSpec[Any]]] = {s.wire.campaign: s for s in BASE_SPECS}
_BASE_TYPES: Final = tuple(_BASE_BY_TYPE)
_BASE_CHOICES: Final = "duchi, piecewise or hybrid"


def default_k(epsilon: float, d: int) -> int:
    """k = max(1, min(D, floor(eps / 2.5))) (Wang et al., ICDE 2019, §IV-C)."""
    return max(1, min(d, math.floor(epsilon / 2.5)))


@dataclass(frozen=True, kw_only=True)
class MultidimParams:
    """Wang et al.'s multi-dimensional collection (ICDE 2019, Algorithm 4): k of D attributes per user.

    Args:
        ranges: D pairs (lo, hi), one per attribute, 1 <= D <= 4096.
        k: attributes each user reports, 1 <= k <= D.
        base: the one-dimensional mechanism of every reported attribute, on positions: a
            ``DuchiParams``, ``PiecewiseParams`` or ``HybridParams`` with lo = 0, hi = 1 (each attribute's
            value is mapped to its position in its own range first).
        out_of_range: ``"clamp"`` or ``"reject"``, for every attribute.

    A report is k pairs (attribute, code), attributes strictly increasing. epsilon = k * base.epsilon
    (sequential composition; which attributes are sampled does not depend on the values).
    """

    name: ClassVar[str] = "multidim"
    ranges: tuple[tuple[float, float], ...]
    k: int
    base: BaseParams
    out_of_range: OutOfRange = "clamp"

    def __post_init__(self) -> None:
        if isinstance(self.ranges, str | bytes) or not isinstance(self.ranges, Iterable):
            raise InvalidParameterError("ranges", self.ranges, "a sequence of (lo, hi) pairs")
        pairs = tuple(self.ranges)
        if not 1 <= len(pairs) <= MAX_ATTRIBUTES:
            raise InvalidParameterError(
                "ranges", f"<{len(pairs)} ranges>", f"1 to {MAX_ATTRIBUTES} (lo, hi) pairs"
            )
        checked = []
        for i, pair in enumerate(pairs):
            if not (isinstance(pair, tuple | list) and len(pair) == 2):
                raise InvalidParameterError(f"ranges[{i}]", pair, "a (lo, hi) pair")
            checked.append(check_range(pair[0], pair[1], prefix=f"ranges[{i}]."))
        object.__setattr__(self, "ranges", tuple(checked))
        check_int("k", self.k, 1, len(checked))
        if not isinstance(self.base, _BASE_TYPES):
            raise InvalidParameterError("base", self.base, "DuchiParams, PiecewiseParams or HybridParams")
        if (self.base.lo, self.base.hi) != (0.0, 1.0):
            raise InvalidParameterError(
                "base",
                f"lo={self.base.lo!r}, hi={self.base.hi!r}",
                "a base mechanism on positions: lo=0, hi=1",
            )
        object.__setattr__(self, "out_of_range", check_policy(self.out_of_range))

    @classmethod
    def from_epsilon(
        cls,
        ranges: Sequence[tuple[float, float]],
        epsilon: float,
        *,
        base: str = "piecewise",
        k: int | None = None,
        cells: int = DEFAULT_CELLS,
        out_of_range: OutOfRange = "clamp",
    ) -> MultidimParams:
        """k attributes per user (default :func:`default_k`) each with ``base`` at epsilon / k."""
        eps = check_epsilon(epsilon)
        pairs = tuple(ranges) if not isinstance(ranges, str | bytes) else ranges
        d = len(pairs)
        kk = default_k(eps, max(d, 1)) if k is None else k
        check_int("k", kk, 1, max(d, 1))
        base_spec = _BASE_BY_NAME.get(base)
        if base_spec is None:
            raise InvalidParameterError("base", base, _BASE_CHOICES)
        extra: dict[str, Any] = {"cells": cells} if "cells" in base_spec.epsilon_fields else {}
        with warnings.catch_warnings():
            # The composed epsilon is checked (and warned about) once, below.
            warnings.simplefilter("ignore", PrivacyQuantizationWarning)
            b: BaseParams = base_spec.params_type.from_epsilon(0.0, 1.0, eps / kk, **extra)
        params = cls(ranges=tuple(pairs), k=kk, base=b, out_of_range=out_of_range)
        report_quantization(eps, params.epsilon)
        return params

    @property
    def d(self) -> int:
        """D, the number of attributes."""
        return len(self.ranges)

    @property
    def epsilon(self) -> float:
        return self.k * self.base.epsilon

    @functools.cached_property
    def layout(self) -> NumericLayout:
        """The base mechanism's code layout (in each attribute's own position units)."""
        return self.base.layout

    @property
    def reject(self) -> bool:
        return self.out_of_range == "reject"

    def positions_of(self, values: object) -> list[float]:
        """Validated positions of one user's D values (every attribute is checked, sampled or not).

        Raises:
            DomainError: not a sequence of D numbers, or a value that is NaN, infinite or (``reject``)
                out of its attribute's range (named ``values[i]``).
        """
        if isinstance(values, str | bytes | Mapping) or not isinstance(values, Iterable):
            raise DomainError("values", values, f"a sequence of {self.d} numbers")
        vals = list(values)
        if len(vals) != self.d:
            raise DomainError("values", f"<{len(vals)} values>", f"a sequence of exactly D={self.d} numbers")
        reject = self.out_of_range == "reject"
        out = []
        for i, (v, (lo, hi)) in enumerate(zip(vals, self.ranges, strict=True)):
            # Fast path for a float in range; anything else gets the full validation (and its message).
            if type(v) is float and lo <= v <= hi:
                out.append((v - lo) / (hi - lo))
            else:
                out.append(position(v, lo, hi, reject, f"values[{i}]"))
        return out


def base_spec_of(params: MultidimParams) -> OneDimSpec[Any]:
    """The spec of ``params``' base mechanism."""
    return _BASE_BY_TYPE[type(params.base)]


# -------------------------------------------------------------------------------------------- encoder


class MultidimEncoder:
    """Wang et al.'s multi-dimensional collection: k sampled attributes, each with the base mechanism.

    A report is a tuple of k ``(attribute, code)`` pairs with strictly increasing attributes (sorting
    makes the encoding canonical: the order of sampling carries no information anyway).
    """

    __slots__ = ("_base", "_d", "_k", "_per", "_ranges", "params")

    def __init__(self, params: MultidimParams) -> None:
        if not isinstance(params, MultidimParams):
            raise InvalidParameterError("params", params, "a MultidimParams")
        self.params = params
        self._base: OneDimEncoder = base_spec_of(params).new_encoder(params.base)
        self._d = params.d
        self._k = params.k
        self._per = self._base._nbytes
        self._ranges = params.ranges

    def __repr__(self) -> str:
        return f"MultidimEncoder(params={self.params!r})"

    def encode(self, values: Sequence[float]) -> tuple[tuple[int, int], ...]:
        """Randomize one user's D values with the OS CSPRNG. Production path; not seedable by design.

        Every value is validated (sampled or not). k distinct attributes are chosen uniformly with Floyd's
        algorithm (each step an exact Lemire draw), and each is encoded with the base mechanism.

        Returns:
            ``((attribute, code), ...)``: k pairs, attributes strictly increasing.

        Raises:
            DomainError: not a sequence of exactly D numbers, or a value that is NaN, infinite, or out of
                its range with ``out_of_range="reject"`` (named ``values[i]``).
        """
        d, k, per = self._d, self._k, self._per
        pos: Sequence[float]
        if type(values) in (list, tuple) and len(values) == d and self._all_in_range(values):
            pos = values  # positions computed below, for the sampled attributes only
            fast = True
        else:
            pos = self.params.positions_of(values)
            fast = False
        buf = _rnd._source(4 * k + per * k)
        chosen: set[int] = set()
        for step, j in enumerate(range(d - k, d)):
            t = uniform_below(j + 1, from_bytes(buf[4 * step : 4 * step + 4], "little"))
            chosen.add(j if t in chosen else t)
        core = self._base._core
        out = []
        off = 4 * k
        ranges = self._ranges
        for a in sorted(chosen):
            s = pos[a]
            if fast:
                lo, hi = ranges[a]
                s = (s - lo) / (hi - lo)
            out.append((a, core(s, from_bytes(buf[off : off + per], "little"))))
            off += per
        return tuple(out)

    def _all_in_range(self, values: Sequence[object]) -> bool:
        for v, (lo, hi) in zip(values, self._ranges, strict=True):
            if type(v) is not float or not lo <= v <= hi:
                return False
        return True

    def encode_batch(
        self, values: ArrayLike, rng: np.random.Generator
    ) -> tuple[NDArray[np.uint32], NDArray[np.uint32]]:
        """Randomize an (n, D) array of users' values with a seeded numpy Generator. For simulation only.

        Attributes are a uniform k-subset per user (the k smallest of D uniform keys), sorted.

        Returns:
            ``(attributes, codes)``, both uint32 of shape (n, k).

        Raises:
            DomainError: not an (n, D) array, a value that is not finite or (``reject``) out of range.
        """
        import numpy as np

        g = check_rng(rng)
        arr = np.asarray(values)
        if arr.ndim != 2 or arr.shape[1] != self._d:
            raise DomainError(
                "values", f"<array of shape {arr.shape}>", f"an (n, {self._d}) array of numbers"
            )
        lo = np.array([r[0] for r in self.params.ranges])
        hi = np.array([r[1] for r in self.params.ranges])
        s = positions(arr, lo, hi, self.params.reject)
        n, d, k = arr.shape[0], self._d, self._k
        if k == d:
            attrs = np.broadcast_to(np.arange(d, dtype=np.int64), (n, d)).copy()
        elif k == 1:
            attrs = g.integers(0, d, size=(n, 1), dtype=np.int64)
        else:
            attrs = np.argpartition(g.random((n, d)), k - 1, axis=1)[:, :k].astype(np.int64)
            attrs.sort(axis=1)
        picked = np.take_along_axis(s, attrs, axis=1)
        codes = self._base.encode_positions(picked.ravel(), g).reshape(n, k)
        return attrs.astype(np.uint32), codes


# ---------------------------------------------------------------------------------------- parameters


def _check_fields(given: Mapping[str, object], allowed: tuple[str, ...]) -> None:
    for name, raw in given.items():
        if name not in allowed:
            raise InvalidParameterError(f"param {name}", raw, f"a field of multidim: {', '.join(allowed)}")


def _ranges_of(domain: object, given: dict[str, object]) -> tuple[tuple[float, float], ...]:
    """The attributes' ranges: ``ranges=lo:hi,...``, or ``lo``/``hi`` for each of ``domain`` = D."""
    if "ranges" in given:
        if "lo" in given or "hi" in given:
            raise InvalidParameterError(
                "ranges", given["ranges"], "either ranges or lo/hi with a domain, not both"
            )
        ranges = parse_ranges(given.pop("ranges"))
        if domain is not None and domain != len(ranges):
            raise InvalidParameterError("domain", domain, f"{len(ranges)} (the number of ranges) or nothing")
        return ranges
    if isinstance(domain, bool) or not isinstance(domain, int):
        raise InvalidParameterError(
            "domain", domain, "the number of attributes D (with lo/hi), or give ranges=lo:hi,lo:hi,..."
        )
    if "lo" not in given or "hi" not in given:
        raise InvalidParameterError("lo", given.get("lo"), "lo and hi for every attribute (or ranges=...)")
    lo, hi = as_float("lo", given.pop("lo")), as_float("hi", given.pop("hi"))
    return ((lo, hi),) * check_int("domain", domain, 1, MAX_ATTRIBUTES)


_EPSILON_FIELDS: Final = ("ranges", "lo", "hi", "base", "k", "cells", "out_of_range")


def make_multidim(epsilon: float | None, domain: object, fields: Mapping[str, object]) -> MultidimParams:
    """Multidim parameters by name (``make_params("multidim", ...)``).

    With ``epsilon``: ``ranges="lo:hi,..."`` (or ``lo``/``hi`` with ``domain`` = D), ``base``
    (piecewise by default, hybrid or duchi), ``k``, ``cells``, ``out_of_range``. Without it the mechanism
    is given directly: the ranges, ``k``, ``base`` and the base mechanism's own fields (duchi:
    ``low_probability``; piecewise: ``cells``, ``window``, ``high_probability``; hybrid: those and
    ``low_probability``, ``mix_probability``), as :meth:`MultidimSpec.make_args` writes them.
    """
    given = dict(fields)
    policy = str(given.pop("out_of_range", "clamp"))
    if epsilon is not None:
        _check_fields(given, _EPSILON_FIELDS)
        ranges = _ranges_of(domain, given)
        base = str(given.pop("base", "piecewise"))
        k = as_int("k", given.pop("k")) if "k" in given else None
        cells = as_int("cells", given.pop("cells")) if "cells" in given else DEFAULT_CELLS
        return MultidimParams.from_epsilon(ranges, epsilon, base=base, k=k, cells=cells, out_of_range=policy)  # type: ignore[arg-type]
    base_name = given.get("base", "piecewise")
    base_spec = _BASE_BY_NAME.get(base_name) if isinstance(base_name, str) else None
    if base_spec is None:
        raise InvalidParameterError("base", base_name, _BASE_CHOICES)
    direct = base_spec.direct_fields
    _check_fields(given, ("ranges", "lo", "hi", "base", "k", "out_of_range", *direct))
    if "k" not in given:
        raise InvalidParameterError(
            "epsilon",
            None,
            f"an epsilon > 0, or k and the fields of base={base_spec.name} ({', '.join(direct)})",
        )
    ranges = _ranges_of(domain, given)
    given.pop("base", None)
    k = as_int("k", given.pop("k"))
    kw = {n: (as_int(n, v) if n in INT_FIELDS else as_float(n, v)) for n, v in given.items()}
    try:
        base = base_spec.params_type(lo=0.0, hi=1.0, **kw)
    except TypeError as exc:  # a field of the base mechanism is missing
        raise InvalidParameterError(
            "epsilon",
            None,
            f"an epsilon, or k and the fields {', '.join(direct)} of base={base_spec.name} ({exc})",
        ) from None
    return MultidimParams(ranges=ranges, k=k, base=base, out_of_range=policy)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- codec


# ----------------------------------------------------------------------------------------------- spec


class MultidimSpec(MechanismSpec[MultidimParams]):
    """Multi-dimensional collection for every layer (:mod:`ldp_client.spec`; layouts in the module
    docstring). Parameters by name: :func:`make_multidim`. Items: the attributes "0".."D-1"; the inputs of
    exhaustive checks are every attribute at lo, at hi, at the middle, and alternating lo/hi."""

    name: ClassVar[str] = MultidimParams.name
    params_type: ClassVar[type[Any]] = MultidimParams
    kind: ClassVar[Kind] = Kind.MEAN
    wire: ClassVar[WireNames] = WireNames(campaign="multidim", batch="multidim", report="multidim")
    takes_domain: ClassVar[bool] = True  # the number of attributes D, with lo/hi (or ranges instead)

    def make(
        self, *, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]
    ) -> MultidimParams:
        return make_multidim(epsilon, domain, fields)

    def make_args(self, params: MultidimParams) -> MakeArgs:
        base = params.base
        fields: dict[str, object] = {
            "ranges": ",".join(f"{lo!r}:{hi!r}" for lo, hi in params.ranges),
            "k": params.k,
            "base": base.name,
            "out_of_range": params.out_of_range,
        }
        fields.update((f, getattr(base, f)) for f in base_spec_of(params).direct_fields)
        return MakeArgs(fields=fields)

    def params_to_proto(self, params: MultidimParams) -> campaign_pb2.MultidimParams:
        msg = campaign_pb2.MultidimParams(
            lo=[r[0] for r in params.ranges],
            hi=[r[1] for r in params.ranges],
            out_of_range=POLICY_TO_PROTO[params.out_of_range],
            k=params.k,
        )
        base_spec = base_spec_of(params)
        getattr(msg, base_spec.wire.campaign).CopyFrom(base_spec.params_to_proto(params.base))
        return msg

    def params_from_proto(self, msg: campaign_pb2.MultidimParams) -> MultidimParams:
        if len(msg.lo) != len(msg.hi):
            raise InvalidParameterError("hi", f"<{len(msg.hi)} values>", f"{len(msg.lo)} values (one per lo)")
        member = msg.WhichOneof("base")
        base_spec = _BASE_BY_MEMBER.get(member) if member is not None else None
        if member is None or base_spec is None:
            raise InvalidParameterError("base", None, "one of duchi, piecewise, hybrid")
        try:
            base = base_spec.params_from_proto(getattr(msg, member))
        except InvalidParameterError as exc:
            raise InvalidParameterError(f"{member}.{exc.field}", exc.value, exc.allowed) from exc
        return MultidimParams(
            ranges=tuple(zip(msg.lo, msg.hi, strict=True)),
            k=msg.k,
            base=base,
            out_of_range=policy_from_proto(msg.out_of_range, "out_of_range"),
        )

    def new_encoder(self, params: MultidimParams) -> MultidimEncoder:
        """The mechanism's encoder object (per report and batch)."""
        return MultidimEncoder(params)

    def encoder(
        self, params: MultidimParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        return MultidimEncoder(params).encode

    # ----------------------------------------------------------------------------------------- codec

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: MultidimParams, columns: Any) -> None:
        import numpy as np

        if not isinstance(columns, tuple) or len(columns) != 2:
            raise InvalidReportError(
                "multidim", type(columns).__name__, "an (attributes, codes) tuple of arrays"
            )
        attrs = as_code_array("multidim.attributes", columns[0], 2)
        codes = as_code_array("multidim.codes", columns[1], 2)
        k = params.k
        if attrs.shape[1] != k or codes.shape != attrs.shape:
            raise InvalidReportError(
                "multidim", f"{attrs.shape} and {codes.shape}", f"two arrays of shape (n, {k}) (k = {k})"
            )
        check_count("count", attrs.shape[0])
        check_attributes(attrs, params.d, "multidim.attributes")
        check_codes(codes, params.layout.num_codes, "multidim.codes")
        msg.count = attrs.shape[0]
        msg.multidim.attributes = np.ascontiguousarray(attrs).astype(U32_LE).tobytes()
        msg.multidim.codes = np.ascontiguousarray(codes).astype(U32_LE).tobytes()

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: MultidimParams, n: int) -> Any:
        import numpy as np

        k = params.k
        cols = msg.multidim
        how = f"4 * count * k for count={n}, k={k} little-endian uint32"
        check_length("multidim.attributes", cols.attributes, 4 * n * k, how)
        check_length("multidim.codes", cols.codes, 4 * n * k, how)
        attrs = np.frombuffer(cols.attributes, dtype=U32_LE).reshape(n, k)
        codes = np.frombuffer(cols.codes, dtype=U32_LE).reshape(n, k)
        check_attributes(attrs, params.d, "multidim.attributes")
        check_codes(codes, params.layout.num_codes, "multidim.codes")
        return attrs.astype(np.uint32, copy=False), codes.astype(np.uint32, copy=False)

    def report_to_proto(self, msg: reports_pb2.Report, params: MultidimParams, output: Any) -> None:
        attrs, codes = pairs_value("report", output, params.k, params.d, params.layout.num_codes)
        msg.multidim.attributes.extend(attrs)
        msg.multidim.codes.extend(codes)

    def report_from_proto(self, msg: reports_pb2.Report, params: MultidimParams) -> Any:
        import numpy as np

        k = params.k
        attrs = np.array(msg.multidim.attributes, dtype=np.uint32)
        codes = np.array(msg.multidim.codes, dtype=np.uint32)
        if attrs.size != k or codes.size != k:
            raise InvalidReportError(
                "multidim", f"{attrs.size} attributes, {codes.size} codes", f"{k} of each (k = {k})"
            )
        a2, c2 = attrs.reshape(1, k), codes.reshape(1, k)
        check_attributes(a2, params.d, "multidim.attributes")
        check_codes(c2, params.layout.num_codes, "multidim.codes")
        return a2, c2

    def batch_from_reports(self, params: MultidimParams, reports: Sequence[Any]) -> Any:
        import numpy as np

        n = len(reports)
        pairs = [
            pairs_value(f"reports[{i}]", r, params.k, params.d, params.layout.num_codes)
            for i, r in enumerate(reports)
        ]
        attrs = np.array([a for a, _ in pairs], dtype=np.uint32).reshape(n, params.k)
        codes = np.array([c for _, c in pairs], dtype=np.uint32).reshape(n, params.k)
        return attrs, codes

    def row_fields(self, params: MultidimParams) -> tuple[RowField, ...]:
        pair = (RowField(("multidim", "attributes"), 4), RowField(("multidim", "codes"), 4))
        return pair * params.k

    def row_packer(self, params: MultidimParams) -> Callable[[Any], bytes]:
        return pack_pairs

    def row_unpacker(self, params: MultidimParams) -> Callable[[bytes], Any]:
        return unpack_pairs

    # ------------------------------------------------------------------------------------ simulation

    def encode_batch(
        self,
        params: MultidimParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        import numpy as np

        x = np.asarray(self.inputs(params), dtype=np.float64)[np.asarray(values)]
        return MultidimEncoder(params).encode_batch(x, rng)

    def encode_values(
        self, params: MultidimParams, values: NDArray[np.float64], rng: np.random.Generator
    ) -> Any:
        return MultidimEncoder(params).encode_batch(values, rng)

    # ---------------------------------------------------------------------------------------- server

    def layout(self, params: MultidimParams) -> Layout:
        codes = params.layout
        return Layout.moments(params.d, codes.num_codes, codes.special_codes)

    def layout_batch(self, params: MultidimParams, columns: Any) -> Any:
        import numpy as np

        if not isinstance(columns, tuple) or len(columns) != 2:
            raise InvalidReportError(
                "reports", type(columns).__name__, "an (attributes, codes) tuple for multidim"
            )
        attrs, codes = (np.asarray(x) for x in columns)
        if attrs.ndim != 2 or attrs.shape != codes.shape or attrs.shape[1] != params.k:
            raise InvalidReportError(
                "reports", f"{attrs.shape} and {codes.shape}", f"two arrays of shape (n, {params.k})"
            )
        if params.k > 1 and attrs.size and bool((np.diff(attrs.astype(np.int64), axis=1) <= 0).any()):
            raise InvalidReportError(
                "attributes", "a repeated or unsorted attribute", "k distinct increasing attributes"
            )
        return codes.ravel(), attrs.ravel(), attrs.shape[0]

    def items(self, params: MultidimParams) -> tuple[str, ...]:
        return tuple(str(a) for a in range(params.d))

    def inputs(self, params: MultidimParams) -> tuple[Any, ...]:
        lows = tuple(lo for lo, _ in params.ranges)
        highs = tuple(hi for _, hi in params.ranges)
        middles = tuple((lo + hi) / 2.0 for lo, hi in params.ranges)
        alternating = tuple(r[i % 2] for i, r in enumerate(params.ranges))
        return tuple(dict.fromkeys((lows, highs, middles, alternating)))

    def input_value(self, params: MultidimParams, index: int) -> Any:
        return self.inputs(params)[index]

    def mean_design(self, params: MultidimParams) -> MeanDesign:
        base = params.base
        return MeanDesign(
            labels=self.items(params),
            ranges=params.ranges,
            scale=Fraction(params.d, params.k),
            variance_s=base.variance_s,
            max_variance_s=lambda: base.max_variance_s,
        )

    def moments(self, params: MultidimParams, acc: MomentsView) -> Moments:
        return moments_of(self.mean_design(params), params.layout, acc)

    # ------------------------------------------------------------------------------ conformance tests

    def examples(self) -> tuple[MultidimParams, ...]:
        return (
            MultidimParams.from_epsilon(((0.0, 1.0), (-5.0, 5.0)), 1.0, base="duchi"),
            MultidimParams(
                ranges=((0.0, 1.0), (-1.0, 1.0), (10.0, 12.0)),
                k=2,
                base=PiecewiseParams(lo=0.0, hi=1.0, cells=4, window=2, high_probability=0.75),
            ),
            MultidimParams(
                ranges=((0.0, 4.0), (0.0, 8.0)),
                k=1,
                base=HybridParams(
                    lo=0.0,
                    hi=1.0,
                    cells=4,
                    window=1,
                    high_probability=0.5,
                    low_probability=0.25,
                    mix_probability=0.5,
                ),
                out_of_range="reject",
            ),
        )

    def exact_outputs(self, params: MultidimParams, value: Any) -> Mapping[Hashable, Fraction]:
        """Every k-subset of the attributes w.p. 1/C(D, k) (sorted), then each sampled attribute's code from
        the base mechanism's exact distribution at its position."""
        pos = params.positions_of(value)
        base_spec = base_spec_of(params)
        per_attribute = [base_spec.distribution(params.base, s) for s in pos]
        subset = Fraction(1, math.comb(params.d, params.k))
        out: dict[Hashable, Fraction] = {}
        for attrs in itertools.combinations(range(params.d), params.k):
            for codes in itertools.product(*(per_attribute[a].items() for a in attrs)):
                p = subset
                for _, q in codes:
                    p *= q
                out[tuple((a, c) for a, (c, _) in zip(attrs, codes, strict=True))] = p
        return out


SPEC = MultidimSpec()
"""Multi-dimensional collection, as :mod:`ldp_client.registry` lists it."""
