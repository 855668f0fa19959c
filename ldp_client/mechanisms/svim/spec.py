"""SVIM's :class:`MechanismSpec`: wire, journal rows, accumulator and estimation hooks (:mod:`.core`).

Wire: ``Campaign.svim`` (``SvimParams``); batch columns ``groups`` (u16), ``a``, ``b`` (u64), ``buckets``
(u32) of ``ReportBatch.svim``; ``Report.svim`` one (group, a, b, bucket). Journal row: the 22-byte level row
of :mod:`ldp_client.mechanisms._level_rows` (the group in the level's place).

Accumulator: ``support`` of m + (size_cap + 1) + 2 counts: the PS group's support count of each of the m
values (a bincount of GRR values below m, or local hashing's support test over the m values), the size
group's count of each reported size, then the reports of each group (size, PS). n is every report of the
stage.

Estimation (kind SUPPORT, the one estimator of :mod:`ldp_aggregator.estimators`): a user of the stage is in
the PS group with probability pi = (hi - lo - size_share)/(hi - lo), independently of its set (its slot is
a uniform HMAC output), and a PS report supports value v w.p. p* = q + (p - q)/L if the user's set holds v
(with at most L elements) and q otherwise (PSFO, Wang-Li-Jha). So among all n reports of the stage, a
report supports v w.p. pi p* (holder) or pi q* (non-holder): the Support contract with those rates, whose
estimator (C_v - n pi q*)/(pi (p* - q*)) is unbiased for the number of the stage's users holding v, with
the variance of :mod:`ldp_client.spec` (as hio divides its rates by its number of levels).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.codecs import (
    as_int,
    domain_from_proto,
    domain_to_proto,
)
from ldp_client.domain import Domain, DomainLike, no_more_fields, require_domain, take_field
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.mechanisms._level_rows import (
    LevelRowsCodec,
    check_seed,
)
from ldp_client.mechanisms.grr import SPEC as GRR_SPEC
from ldp_client.mechanisms.grr import GRRParams, exact_channel
from ldp_client.mechanisms.olh import OLH_SPEC, OLHParams, balanced_seeds, exact_report_probability
from ldp_client.mechanisms.olh import local_hash_support as _lh_support
from ldp_client.mechanisms.svim.core import (
    ITEMS,
    ITEMSETS,
    MAX_PADDING,
    MAX_SVIM_ITEMS,
    PS_GROUP,
    SIZE_GROUP,
    SLOTS,
    SVIMEncoder,
    SVIMParams,
    SVIMReport,
    device_slot,
    encode_sets,
)
from ldp_client.spec import Kind, Layout, MakeArgs, MechanismSpec, SecretSource, Support, WireNames

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray


__all__ = ["SPEC", "SVIMSpec", "format_candidates", "parse_candidates"]

_U16_LE = "<u2"
_FIELDS = (
    "stage", "candidates", "max_items", "size_cap", "inner", "g", "truth_probability", "group_key",
    "stage_lo", "stage_hi", "size_share",
)  # fmt: skip
_STAGE_CODE = {ITEMS: 1, ITEMSETS: 2}
_STAGE_OF_CODE = {v: k for k, v in _STAGE_CODE.items()}


def parse_candidates(domain: Domain, text: str) -> tuple[tuple[int, ...], ...]:
    """``--param candidates=a+b,a+c`` (itemsets separated by ``,``, items by ``+``; each item a label of
    the domain or an index).

    Raises:
        InvalidParameterError: an item that is neither a label nor an index of the domain.
    """
    out = []
    for j, part in enumerate(p for p in text.split(",") if p.strip()):
        items = []
        for token in part.split("+"):
            tok = token.strip()
            if domain.labels is not None and tok in domain.labels:
                items.append(domain.labels.index(tok))
            elif tok.isdigit() and int(tok) < domain.size:
                items.append(int(tok))
            else:
                raise InvalidParameterError(
                    f"candidates[{j}]",
                    tok,
                    f"items of the item domain (labels or indices 0..{domain.size - 1})",
                )
        out.append(tuple(items))
    return tuple(out)


def format_candidates(candidates: Sequence[Sequence[int]]) -> str:
    """The ``candidates`` field as ``make`` parses it: indices (labels may hold ``+`` or ``,``)."""
    return ",".join("+".join(str(i) for i in c) for c in candidates)


def _make(*, epsilon: float | None, domain: object, fields: dict[str, object]) -> SVIMParams:
    dom = require_domain(domain, "svim")
    f = dict(fields)
    common: dict[str, Any] = {}
    if "max_items" not in f:
        raise InvalidParameterError("max_items", None, "the padding length L (--param max_items=L)")
    for name in ("max_items", "size_cap", "stage_lo", "stage_hi", "size_share"):
        if name in f:
            common[name] = take_field(f, name, int, "svim")
    for name in ("stage", "group_key"):
        if name in f:
            common[name] = str(take_field(f, name, str, "svim"))
    if "candidates" in f:
        raw = f.pop("candidates")
        common["candidates"] = parse_candidates(dom, raw) if isinstance(raw, str) else raw
    inner = str(take_field(f, "inner", str, "svim")) if "inner" in f else "auto"
    if epsilon is not None:
        no_more_fields(f, "svim", _FIELDS)
        return SVIMParams.from_epsilon(dom, epsilon, inner=inner, **common)
    g = take_field(f, "g", int, "svim") if "g" in f else None
    tp = take_field(f, "truth_probability", float, "svim") if "truth_probability" in f else None
    no_more_fields(f, "svim", _FIELDS)
    if tp is None or inner not in ("grr", "olh") or (inner == "olh") != (g is not None):
        raise InvalidParameterError(
            "params", sorted(fields), "epsilon, or inner=grr|olh with truth_probability (and g for olh)"
        )
    stage = common.get("stage", ITEMS)
    m = dom.size if stage == ITEMS else len(common.get("candidates", ()))
    size = m + int(common["max_items"])
    chosen: GRRParams | OLHParams = (
        GRRParams(domain=Domain.of(size), truth_probability=tp)  # type: ignore[arg-type]
        if inner == "grr"
        else OLHParams(domain=Domain.of(size), g=g, truth_probability=tp)  # type: ignore[arg-type]
    )
    return SVIMParams(domain=dom, inner=chosen, **common)


def _report_value(field_name: str, report: object, params: SVIMParams) -> tuple[int, int, int, int]:
    missing = object()
    parts = [getattr(report, name, missing) for name in ("group", "a", "b", "bucket")]
    if any(p is missing for p in parts):
        raise InvalidReportError(field_name, report, "an SVIMReport(group, a, b, bucket)")
    group = as_int(f"{field_name}.group", parts[0], "a group, 0 (size) or 1 (padding and sampling)")
    if group not in (SIZE_GROUP, PS_GROUP):
        raise InvalidReportError(f"{field_name}.group", group, "0 (size) or 1 (padding and sampling)")
    a, b = check_seed(field_name, parts[1], parts[2])
    bound = _bound(params, group)
    y = as_int(f"{field_name}.bucket", parts[3], f"a bucket in [0, {bound - 1}]")
    if not 0 <= y < bound:
        raise InvalidReportError(f"{field_name}.bucket", y, f"a bucket in [0, {bound - 1}] in group {group}")
    if (a or b) and not _seeded(params, group):
        raise InvalidReportError(f"{field_name}.a", a, f"0 (no seed) in group {group}")
    return group, a, b, y


def _bound(params: SVIMParams, group: int) -> int:
    if group == SIZE_GROUP:
        return params.size_cap + 1
    return params.inner.g if isinstance(params.inner, OLHParams) else params.inner.domain.size


def _seeded(params: SVIMParams, group: int) -> bool:
    return group == PS_GROUP and isinstance(params.inner, OLHParams)


def _check_values(groups: Any, a: Any, b: Any, y: Any, params: SVIMParams, field_name: str) -> None:
    import numpy as np

    g = np.asarray(groups, dtype=np.int64)
    if g.size and (int(g.min()) < 0 or int(g.max()) > PS_GROUP):
        i = int(np.flatnonzero((g < 0) | (g > PS_GROUP))[0])
        raise InvalidReportError(f"{field_name}.groups", int(g[i]), "0 (size) or 1 (padding and sampling)")
    bounds = np.array([_bound(params, SIZE_GROUP), _bound(params, PS_GROUP)], dtype=np.int64)
    yy = np.asarray(y, dtype=np.int64)
    bad = yy >= bounds[g]
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InvalidReportError(
            f"{field_name}.buckets", int(yy[i]), f"a bucket in [0, {bounds[g[i]] - 1}] in group {int(g[i])}"
        )
    seeded = np.array([_seeded(params, SIZE_GROUP), _seeded(params, PS_GROUP)])[g]
    unseeded = ~seeded & ((np.asarray(a) != 0) | (np.asarray(b) != 0))
    if unseeded.any():
        i = int(np.flatnonzero(unseeded)[0])
        raise InvalidReportError(f"{field_name}.a", int(a[i]), f"0 (no seed) in group {int(g[i])}")


def _slot_weights(params: SVIMParams, value: Any) -> tuple[int, list[tuple[int, Fraction]]]:
    """(size, [(padded element, probability)]) of a user's set: PSFO's sampled element exactly."""
    elements = params.elements(SVIMEncoder(params, group=PS_GROUP).items_of(value))
    k = len(elements)
    width = max(k, params.max_items)
    picks = [(elements[j] if j < k else params.values + j, Fraction(1, width)) for j in range(width)]
    return k, picks


class SVIMSpec(LevelRowsCodec, MechanismSpec[SVIMParams]):
    """SVIM, one stage per campaign (module docstrings of this module and :mod:`.core`)."""

    name: ClassVar[str] = SVIMParams.name
    params_type: ClassVar[type[Any]] = SVIMParams
    kind: ClassVar[Kind] = Kind.SUPPORT
    wire: ClassVar[WireNames] = WireNames(campaign="svim", batch="svim", report="svim")
    level_field: ClassVar[str] = "groups"
    report_type: ClassVar[Callable[..., Any]] = SVIMReport
    takes_domain: ClassVar[bool] = True
    per_device_state: ClassVar[bool] = True
    reports_per_device: ClassVar[int | None] = 1  # user-level epsilon: one report per device, to one stage

    def make(
        self, *, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]
    ) -> SVIMParams:
        return _make(epsilon=epsilon, domain=domain, fields=fields)

    def make_args(self, params: SVIMParams) -> MakeArgs:
        dom = params.domain
        inner = params.inner
        fields: dict[str, object] = {"stage": params.stage}
        if params.candidates:
            fields["candidates"] = format_candidates(params.candidates)
        fields.update(max_items=params.max_items, size_cap=params.size_cap)
        fields["inner"] = "grr" if isinstance(inner, GRRParams) else "olh"
        if isinstance(inner, OLHParams):
            fields["g"] = inner.g
        fields["truth_probability"] = inner.truth_probability
        if params.group_key:
            fields["group_key"] = params.group_key
        fields.update(stage_lo=params.stage_lo, stage_hi=params.stage_hi, size_share=params.size_share)
        return MakeArgs(domain=dom.labels if dom.labels is not None else dom.size, fields=fields)

    def params_to_proto(self, params: SVIMParams) -> campaign_pb2.SvimParams:
        msg = campaign_pb2.SvimParams(
            domain=domain_to_proto(params.domain),
            stage=_STAGE_CODE[params.stage],
            candidates=[campaign_pb2.Itemset(items=list(c)) for c in params.candidates],
            max_items=params.max_items,
            size_cap=params.size_cap,
            group_key=params.group_key,
            stage_lo=params.stage_lo,
            stage_hi=params.stage_hi,
            size_share=params.size_share,
        )
        if isinstance(params.inner, GRRParams):
            msg.grr.CopyFrom(GRR_SPEC.params_to_proto(params.inner))
        else:
            msg.olh.CopyFrom(OLH_SPEC.params_to_proto(params.inner))
        return msg

    def params_from_proto(self, msg: campaign_pb2.SvimParams) -> SVIMParams:
        stage = _STAGE_OF_CODE.get(msg.stage)
        if stage is None:
            raise InvalidParameterError("stage", msg.stage, "1 (items) or 2 (itemsets)")
        member = msg.WhichOneof("inner")
        if member is None:
            raise InvalidParameterError("inner", None, "exactly one of grr, olh")
        try:
            spec: Any = GRR_SPEC if member == "grr" else OLH_SPEC
            inner = spec.params_from_proto(getattr(msg, member))
        except InvalidParameterError as exc:
            raise InvalidParameterError(f"inner.{member}.{exc.field}", exc.value, exc.allowed) from exc
        return SVIMParams(
            domain=domain_from_proto(msg.domain),
            stage=stage,
            candidates=tuple(tuple(c.items) for c in msg.candidates),
            max_items=msg.max_items,
            size_cap=msg.size_cap,
            inner=inner,
            group_key=msg.group_key,
            stage_lo=msg.stage_lo,
            stage_hi=msg.stage_hi,
            size_share=msg.size_share,
        )

    def report_bits(self, params: SVIMParams) -> int:
        """16 bits of group, the seed when the inner oracle is local hashing, and a 32-bit bucket."""
        return 16 + (128 if isinstance(params.inner, OLHParams) else 0) + 32

    def needs_secret(self, params: SVIMParams) -> bool:
        return True

    def encoder(
        self, params: SVIMParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        if secret is None:
            raise InvalidParameterError(
                "secret", None, "the device's client secret (svim derives its group from it)"
            )
        key = secret if not callable(secret) else secret()
        slot = device_slot(params, campaign_id, key)
        group = params.group_of_slot(slot)
        if group is None:
            raise InvalidParameterError(
                "device",
                f"slot {slot}",
                f"a device of slots [{params.stage_lo}, {params.stage_hi}) of svim group key "
                f"{params.group_key or campaign_id!r}: this device reports to the other stage only",
            )
        return SVIMEncoder(params, group=group).encode

    # -------------------------------------------------------------------------------- codec

    def report_value(self, field: str, report: object, params: SVIMParams) -> tuple[int, int, int, int]:
        return _report_value(field, report, params)

    def check_level_values(self, columns: Sequence[Any], params: SVIMParams, field: str) -> None:
        groups, a, b, y = columns
        if y.size and int(y.min()) < 0:
            raise InvalidReportError(f"{field}.buckets", int(y.min()), "non-negative buckets")
        _check_values(groups, a, b, y, params, field)

    # --------------------------------------------------------------------------- simulation

    def encode_batch(
        self,
        params: SVIMParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        """Simulated users of the stage holding the sets of :meth:`inputs` (value i: input i), through the
        vectorised set encoder (:func:`.core.encode_sets`; groups drawn as the slots give them)."""
        import numpy as np

        sets = [list(_input_items(params, i)) for i in range(params.values)]
        width = max(len(s) for s in sets)
        table = np.full((params.values, width), -1, dtype=np.int64)
        for i, s in enumerate(sets):
            table[i, : len(s)] = s
        idx = np.asarray(values, dtype=np.int64)
        return encode_sets(params, table[idx], rng)

    # ------------------------------------------------------------------------------- server

    def layout(self, params: SVIMParams) -> Layout:
        return Layout.support(params.values + params.size_cap + 1 + 2)

    def layout_batch(self, params: SVIMParams, columns: Any) -> Any:
        """(n, support): the PS group's support of the m values (GRR: a bincount; OLH: the vectorised
        support test over the m values only, never the dummies), the size group's sizes, the group counts."""
        import numpy as np

        groups, a, b, y = self.checked_columns(columns, params, "reports")
        ps = groups == PS_GROUP
        m = params.values
        if isinstance(params.inner, GRRParams):
            support = np.bincount(np.asarray(y[ps], dtype=np.int64), minlength=params.inner.domain.size)[:m]
        else:
            view = OLHParams(
                domain=Domain.of(m), g=params.inner.g, truth_probability=params.inner.truth_probability
            )
            support = _lh_support(a[ps], b[ps], y[ps], view)
        sizes = np.bincount(np.asarray(y[~ps], dtype=np.int64), minlength=params.size_cap + 1)
        counts = np.array([int((~ps).sum()), int(ps.sum())], dtype=np.int64)
        return int(groups.shape[0]), np.concatenate([support, sizes, counts]).astype(np.int64)

    def items(self, params: SVIMParams) -> tuple[str, ...]:
        return params.labels()

    def input_value(self, params: SVIMParams, index: int) -> Any:
        return tuple(params.domain.value(i) for i in _input_items(params, index))

    def support_rates(self, params: SVIMParams) -> tuple[float, float]:
        p_star, q_star = params.ps_rates()
        return params.ps_share * p_star, params.ps_share * q_star

    def support(self, params: SVIMParams, acc: Any, candidates: Sequence[str] = ()) -> Support:
        p_star, q_star = self.support_rates(params)
        counts = acc.support[: params.values]
        return Support(labels=self.items(params), counts=counts, n=acc.n, p_star=p_star, q_star=q_star)

    def items_per_user(self, params: SVIMParams) -> tuple[int, int]:
        return (0, params.values)

    # ------------------------------------------------------------------------------- checks

    def examples(self) -> tuple[SVIMParams, ...]:
        # Every stage takes all slots here, so that the conformance test's one device is in it.
        return (
            SVIMParams.from_epsilon(3, 1.0, max_items=1, inner="grr", stage_hi=1000, size_share=100),
            SVIMParams.from_epsilon(
                ("a", "b", "c"), 2.0, max_items=1, inner="grr", size_cap=2, stage_hi=1000, size_share=300
            ),
            SVIMParams(
                domain=Domain.of(3),
                max_items=1,
                size_cap=2,
                inner=OLHParams(domain=Domain.of(4), g=4, truth_probability=0.5),
            ),
            SVIMParams.from_epsilon(
                ("x", "y", "z", "w"),
                1.5,
                stage=ITEMSETS,
                candidates=((0, 1), (2, 3), (0, 2)),
                max_items=1,
                inner="grr",
                stage_lo=0,
                size_share=200,
            ),
        )

    def largest(self) -> tuple[SVIMParams, ...]:
        # 2^14 items padded by 1024, sizes up to 1024 (every slot in the stage: the sweep's one device).
        d, L = MAX_SVIM_ITEMS, MAX_PADDING
        return (
            SVIMParams(
                domain=Domain.of(d),
                max_items=L,
                size_cap=L,
                inner=GRRParams(domain=Domain.of(d + L), truth_probability=0.5),
                stage_hi=SLOTS,
            ),
        )

    def exact_outputs(self, params: SVIMParams, value: Any) -> Mapping[Hashable, Fraction]:
        """A device of the stage: size group w.p. size_share / (hi - lo) (its uniform slot), reporting
        GRR of min(size, size_cap); else PSFO's element through the inner oracle (local hashing
        conditioned on its balanced seed sample, :func:`ldp_client.mechanisms.olh.balanced_seeds`)."""
        width = params.stage_hi - params.stage_lo
        w_size, w_ps = Fraction(params.size_share, width), Fraction(width - params.size_share, width)
        k, picks = _slot_weights(params, value)
        out: dict[Hashable, Fraction] = {}
        if w_size:
            row = exact_channel(params.size_oracle)[min(k, params.size_cap)]
            for y, pr in enumerate(row):
                out[SVIMReport(SIZE_GROUP, 0, 0, y)] = w_size * pr
        inner = params.inner
        if isinstance(inner, GRRParams):
            channel = exact_channel(inner)
            for element, w in picks:
                for y, pr in enumerate(channel[element]):
                    key = SVIMReport(PS_GROUP, 0, 0, y)
                    out[key] = out.get(key, Fraction(0)) + w_ps * w * pr
            return out
        seeds = balanced_seeds(inner.domain.size, inner.g)
        for a, b in seeds:
            for y in range(inner.g):
                pr = sum((w * exact_report_probability(inner, e, a, b, y) for e, w in picks), Fraction(0))
                out[SVIMReport(PS_GROUP, a, b, y)] = w_ps * pr / len(seeds)
        return out

    def exact_output_probability(self, params: SVIMParams, value: Any, output: Any) -> Fraction:
        if not isinstance(output, SVIMReport) or output.group not in (SIZE_GROUP, PS_GROUP):
            return Fraction(0)
        if not isinstance(params.inner, OLHParams) or output.group == SIZE_GROUP:
            return self.exact_outputs(params, value).get(output, Fraction(0))
        width = params.stage_hi - params.stage_lo
        w_ps = Fraction(width - params.size_share, width)
        _, picks = _slot_weights(params, value)
        if not 0 <= output.bucket < params.inner.g:
            return Fraction(0)
        return w_ps * sum(
            (
                w * exact_report_probability(params.inner, e, output.a, output.b, output.bucket)
                for e, w in picks
            ),
            Fraction(0),
        )


def _input_items(params: SVIMParams, index: int) -> tuple[int, ...]:
    """The item indices of input ``index``: item ``index`` alone (stage items) or candidate ``index``."""
    return (index,) if params.stage == ITEMS else params.candidates[index]


SPEC = SVIMSpec()
"""SVIM, as :mod:`ldp_client.registry` lists it."""
