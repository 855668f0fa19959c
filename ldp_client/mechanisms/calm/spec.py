"""CALM's codec and spec (:mod:`ldp_client.mechanisms.calm`): wire, journal rows, accumulator, checks."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_client import _oracle_math
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.codecs import (
    as_int,
    domain_from_proto,
    domain_to_proto,
)
from ldp_client.domain import Domain
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.layouts import MarginalTables
from ldp_client.mechanisms._level_rows import (
    LevelRowsCodec,
    check_seed,
)
from ldp_client.mechanisms.grr import GRREncoder, GRRParams, exact_channel
from ldp_client.mechanisms.olh import (
    LocalHashEncoder,
    balanced_seeds,
    exact_report_probability,
    local_hash_support,
)
from ldp_client.spec import Kind, Layout, MakeArgs, MechanismSpec, SecretSource, Support, WireNames

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray


from ldp_client.mechanisms.calm.core import (
    MAX_ATTRIBUTES,
    MAX_MARGINALS,
    CalmEncoder,
    CalmParams,
    CalmReport,
    attributes_text,
    cell_maps,
    domain_labels,
    group_of,
    make_params,
    marginals_text,
)

__all__ = ["SPEC", "CalmSpec"]

_U16_LE = "<u2"

# ------------------------------------------------------------------------------------------------ codec


def _report_value(field_name: str, report: object, params: CalmParams) -> tuple[int, int, int, int]:
    missing = object()
    parts = [getattr(report, name, missing) for name in ("group", "a", "b", "bucket")]
    if any(p is missing for p in parts):
        raise InvalidReportError(field_name, report, "a CalmReport(group, a, b, bucket)")
    m = len(params.marginals)
    group = as_int(f"{field_name}.group", parts[0], f"a group in [1, {m}]")
    if not 1 <= group <= m:
        raise InvalidReportError(f"{field_name}.group", group, f"a group in [1, {m}]")
    a, b = check_seed(field_name, parts[1], parts[2])
    bound = params.bucket_bound(group)
    y = as_int(f"{field_name}.bucket", parts[3], f"a bucket in [0, {bound - 1}]")
    if not 0 <= y < bound:
        raise InvalidReportError(f"{field_name}.bucket", y, f"a bucket in [0, {bound - 1}]")
    if params.grr[group - 1] and (a or b):
        raise InvalidReportError(f"{field_name}.a", a, f"0 (no seed) in GRR group {group}")
    return group, a, b, y


def _check_values(groups: Any, a: Any, b: Any, y: Any, params: CalmParams, field_name: str) -> None:
    """Groups in [1, m], each bucket below its group's bound, no seed in a GRR group (vectorised)."""
    import numpy as np

    m = len(params.marginals)
    g = np.asarray(groups, dtype=np.int64)
    if g.size and (int(g.min()) < 1 or int(g.max()) > m):
        bad = int(g.min()) if int(g.min()) < 1 else int(g.max())
        raise InvalidReportError(f"{field_name}.groups", bad, f"groups in [1, {m}]")
    bounds = np.array([0, *(params.bucket_bound(i) for i in range(1, m + 1))], dtype=np.int64)
    yy = np.asarray(y, dtype=np.int64)
    over = yy >= bounds[g]
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise InvalidReportError(
            f"{field_name}.buckets", int(yy[i]), f"a bucket in [0, {bounds[g[i]] - 1}] in group {int(g[i])}"
        )
    grr = np.array([False, *params.grr])
    seeded = grr[g] & ((np.asarray(a) != 0) | (np.asarray(b) != 0))
    if seeded.any():
        i = int(np.flatnonzero(seeded)[0])
        raise InvalidReportError(f"{field_name}.a", int(a[i]), f"0 (no seed) in GRR group {int(g[i])}")


# ------------------------------------------------------------------------------------------------- spec


class CalmSpec(LevelRowsCodec, MechanismSpec[CalmParams]):
    """CALM for every layer (:mod:`ldp_client.spec`; module docstring).

    Wire: ``Campaign.calm`` (``CalmParams``); batch columns ``groups`` (u16), ``a``, ``b`` (u64),
    ``buckets`` (u32) of ``ReportBatch.calm``; ``Report.calm`` one (group, a, b, bucket). Journal row: u16
    group, u64 a, u64 b, u32 bucket. Accumulator: ``support`` of sum_i c_{A_i} cell counts and m group
    counts. Items: the full joint's records; marginals through :meth:`marginal_tables`.
    """

    name: ClassVar[str] = CalmParams.name
    params_type: ClassVar[type[Any]] = CalmParams
    kind: ClassVar[Kind] = Kind.SUPPORT
    wire: ClassVar[WireNames] = WireNames(campaign="calm", batch="calm", report="calm")
    level_field: ClassVar[str] = "groups"
    report_type: ClassVar[Callable[..., Any]] = CalmReport
    takes_domain: ClassVar[bool] = False
    per_device_state: ClassVar[bool] = True  # the group comes from the client secret: one client per user
    epsilon_field: ClassVar[str | None] = "truth_probability"

    def make(self, *, epsilon: float | None, domain: Any, fields: dict[str, object]) -> CalmParams:
        return make_params(epsilon=epsilon, domain=domain, fields=dict(fields))

    def make_args(self, params: CalmParams) -> MakeArgs:
        return MakeArgs(
            fields={
                "attributes": attributes_text(params),
                "marginals": marginals_text(params),
                "g": params.g,
                "truth_probability": params.truth_probability,
                "grr": ",".join("1" if x else "0" for x in params.grr),
            },
        )

    def params_to_proto(self, params: CalmParams) -> campaign_pb2.CalmParams:
        return campaign_pb2.CalmParams(
            attributes=[
                campaign_pb2.CalmAttribute(name=n, domain=domain_to_proto(d)) for n, d in params.attributes
            ],
            marginals=[campaign_pb2.CalmMarginal(attributes=list(m)) for m in params.marginals],
            g=params.g,
            truth_probability=params.truth_probability,
            grr=list(params.grr),
        )

    def params_from_proto(self, msg: campaign_pb2.CalmParams) -> CalmParams:
        return CalmParams(
            attributes=tuple((a.name, domain_from_proto(a.domain)) for a in msg.attributes),
            marginals=tuple(tuple(m.attributes) for m in msg.marginals),
            g=msg.g,
            truth_probability=msg.truth_probability,
            grr=tuple(msg.grr),
        )

    def report_bits(self, params: CalmParams) -> int:
        """16 bits of group plus the largest group report: 128 seed bits and the bucket, or a GRR cell."""
        m = len(params.marginals)
        buckets = max(_oracle_math.ceil_log2(params.bucket_bound(i)) for i in range(1, m + 1))
        return 16 + (0 if all(params.grr) else 128) + buckets

    def needs_secret(self, params: CalmParams) -> bool:
        return True

    def encoder(
        self, params: CalmParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        if secret is None:
            raise InvalidParameterError(
                "secret", None, "the device's client secret (calm derives its group from it)"
            )
        key = secret if not callable(secret) else secret()
        return CalmEncoder(params, group=group_of(params, campaign_id, key)).encode

    # -------------------------------------------------------------------------------- codec

    def report_value(self, field: str, report: object, params: CalmParams) -> tuple[int, int, int, int]:
        return _report_value(field, report, params)

    def check_level_values(self, columns: Sequence[Any], params: CalmParams, field: str) -> None:
        groups, a, b, y = columns
        if y.size and int(y.min()) < 0:
            raise InvalidReportError(f"{field}.buckets", int(y.min()), "non-negative buckets")
        _check_values(groups, a, b, y, params, field)

    # --------------------------------------------------------------------------- simulation

    def encode_batch(
        self,
        params: CalmParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        """Simulated users (seeded ``rng`` only), ``values`` their records' joint indices (row-major): a
        uniform group each (what their secrets give), then the group's oracle on the record's cell: one
        vectorised call per group, none per report."""
        import numpy as np

        idx = np.asarray(values)
        d = params.joint_size
        if idx.ndim != 1 or (idx.size and (int(idx.min()) < 0 or int(idx.max()) >= d)):
            raise DomainError("values", f"shape {idx.shape}", f"a 1-D array of joint indices in [0, {d - 1}]")
        idx = idx.astype(np.int64, copy=False)
        n = idx.shape[0]
        m = len(params.marginals)
        groups = rng.integers(1, m + 1, size=n, dtype=np.int64)
        a = np.zeros(n, dtype=np.uint64)
        b = np.zeros(n, dtype=np.uint64)
        y = np.zeros(n, dtype=np.uint32)
        maps = cell_maps(params)
        for i, lp in enumerate(params.group_params):
            rows = np.flatnonzero(groups == i + 1)
            cells = maps[i][idx[rows]]
            if isinstance(lp, GRRParams):
                y[rows] = GRREncoder(lp).encode_batch(cells, rng)
            else:
                a[rows], b[rows], y[rows] = LocalHashEncoder(lp).encode_batch(cells, rng)
        return groups.astype(np.uint16), a, b, y

    # ------------------------------------------------------------------------------- server

    def layout(self, params: CalmParams) -> Layout:
        m = len(params.marginals)
        return Layout.support(sum(params.cells(i) for i in range(m)) + m)

    def layout_batch(self, params: CalmParams, columns: Any) -> Any:
        """(n, support): per group, a bincount of the reported cells (GRR) or local hashing's vectorised
        support test over the marginal's cells, then the reports of each group."""
        import numpy as np

        groups, a, b, y = self.checked_columns(columns, params, "reports")
        parts = []
        for i, lp in enumerate(params.group_params):
            rows = groups == i + 1
            if isinstance(lp, GRRParams):
                parts.append(np.bincount(np.asarray(y[rows], dtype=np.int64), minlength=lp.domain.size))
            else:
                parts.append(local_hash_support(a[rows], b[rows], y[rows], lp))
        per = np.bincount(np.asarray(groups, dtype=np.int64), minlength=len(params.marginals) + 1)[1:]
        return int(groups.shape[0]), np.concatenate([*parts, per]).astype(np.int64)

    def items(self, params: CalmParams) -> tuple[str, ...]:
        """The full joint's records, row-major, each its labels joined by ``|``."""
        doms = [d for _, d in params.attributes]
        return tuple("|".join(p) for p in itertools.product(*(domain_labels(d) for d in doms)))

    def input_value(self, params: CalmParams, index: int) -> Any:
        doms = [d for _, d in params.attributes]
        return tuple(d.value(i) for d, i in zip(doms, params.joint_indices(index), strict=True))

    def item_table(self, params: CalmParams) -> bool:
        return params.full_group() is not None

    def support_rates(self, params: CalmParams) -> tuple[float, float]:
        full = params.full_group()
        m = len(params.marginals)
        p_star, q_star = params.group_rates(full if full is not None else 0)
        return p_star / m, q_star / m

    def support(self, params: CalmParams, acc: Any, candidates: Sequence[str] = ()) -> Support:
        """The full joint from the full set's group, at the whole population's rates p*/m, q*/m.

        Raises:
            InvalidParameterError: the campaign chose no marginal of every attribute.
        """
        full = params.full_group()
        if full is None:
            raise InvalidParameterError(
                "items",
                params.name,
                "a campaign whose marginals include the full attribute set (ask marginals)",
            )
        p_star, q_star = self.support_rates(params)
        start = sum(params.cells(i) for i in range(full))
        counts = acc.support[start : start + params.cells(full)]
        return Support(labels=self.items(params), counts=counts, n=acc.n, p_star=p_star, q_star=q_star)

    def marginal_tables(self, params: CalmParams, acc: Any) -> MarginalTables:
        m = len(params.marginals)
        counts, start = [], 0
        for i in range(m):
            counts.append(acc.support[start : start + params.cells(i)])
            start += params.cells(i)
        rates = [params.group_rates(i) for i in range(m)]
        return MarginalTables(
            attributes=params.names,
            labels=tuple(domain_labels(d) for _, d in params.attributes),
            marginals=params.marginals,
            counts=tuple(counts),
            reports=tuple(int(c) for c in acc.support[start : start + m]),
            n=int(acc.n),
            p_star=tuple(r[0] for r in rates),
            q_star=tuple(r[1] for r in rates),
            grr=params.grr,
        )

    # ------------------------------------------------------------------------------- checks

    def examples(self) -> tuple[CalmParams, ...]:
        two = (("a", Domain.of(2)), ("b", Domain.of(("x", "y", "z"))))
        return (
            CalmParams(attributes=two, marginals=((0, 1), (0,)), g=2, truth_probability=0.75),
            CalmParams.from_epsilon(two, ((0, 1), (1,)), math.log(3.0), g=4),
            # Three binary attributes (8 records: the conformance test encodes 2 * 10^6 reports per record),
            # a 3-way marginal by local hashing and two overlapping 2-way ones.
            CalmParams(
                attributes=(("a", Domain.of(2)), ("b", Domain.of(2)), ("c", Domain.of(2))),
                marginals=((0, 1, 2), (0, 1), (1, 2)),
                g=4,
                truth_probability=0.5,
                grr=(False, True, False),
            ),
        )

    def largest(self) -> tuple[CalmParams, ...]:
        attrs = tuple((f"a{i}", Domain.of(2)) for i in range(MAX_ATTRIBUTES))
        return (
            CalmParams(
                attributes=attrs,
                marginals=tuple(itertools.combinations(range(MAX_ATTRIBUTES), 2))[:MAX_MARGINALS],
                g=2,
                truth_probability=0.75,
            ),
        )

    def exact_outputs(self, params: CalmParams, value: Any) -> Mapping[Hashable, Fraction]:
        """The group uniform on 1..m (a uniformly random secret), then the group's oracle on the record's
        cell: GRR's exact channel, or local hashing conditioned on each marginal's balanced seed sample
        (:func:`ldp_client.mechanisms.olh.balanced_seeds`)."""
        indices = params.record_indices(value)
        m = len(params.marginals)
        out: dict[Hashable, Fraction] = {}
        for i, lp in enumerate(params.group_params):
            cell = params.cell_of(i, indices)
            if isinstance(lp, GRRParams):
                row = exact_channel(lp)[cell]
                out.update({CalmReport(i + 1, 0, 0, y): pr / m for y, pr in enumerate(row)})
                continue
            seeds = balanced_seeds(lp.domain.size, params.g)
            weight = Fraction(1, m * len(seeds))
            for a, b in seeds:
                for y in range(params.g):
                    out[CalmReport(i + 1, a, b, y)] = weight * exact_report_probability(lp, cell, a, b, y)
        return out

    def exact_output_probability(self, params: CalmParams, value: Any, output: Any) -> Fraction:
        m = len(params.marginals)
        if not isinstance(output, CalmReport) or not 1 <= output.group <= m:
            return Fraction(0)
        if not 0 <= output.bucket < params.bucket_bound(output.group):
            return Fraction(0)
        lp = params.group_params[output.group - 1]
        cell = params.cell_of(output.group - 1, params.record_indices(value))
        if isinstance(lp, GRRParams):
            if output.a or output.b:
                return Fraction(0)
            return exact_channel(lp)[cell][output.bucket] / m
        return Fraction(1, m) * exact_report_probability(lp, cell, output.a, output.b, output.bucket)


SPEC = CalmSpec()
"""CALM marginals, as :mod:`ldp_client.registry` lists it."""
