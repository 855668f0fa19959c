"""The registry of mechanism specs: lookups, clear errors, names in order, and one-way imports."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any, get_args

import pytest

from ldp_client import params as params_facade
from ldp_client import registry
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.grr import GRRParams
from ldp_client.mechanisms.paired import SIDE_SPECS
from ldp_client.mechanisms.rr import BinaryRRParams
from ldp_client.params import MECHANISM_NAMES, make_params
from ldp_client.spec import Kind

ROOT = Path(__file__).resolve().parents[2]


def test_lookups_find_the_registered_specs() -> None:
    rr, grr = BinaryRRParams.two_coin(), GRRParams.from_epsilon(3, 1.0)
    assert registry.spec_for(rr).name == "rr" and registry.spec_for(grr).name == "grr"
    assert registry.spec_named("grr") is registry.spec_for(grr)
    assert registry.spec_for_member("rr") is registry.spec_for(rr)
    assert registry.names()[:2] == ("rr", "grr")
    # Not registered: None from find (the facades then refuse it, naming the registered mechanisms).
    assert registry.find(object()) is None
    assert registry.find_named("nope") is None and registry.find_member("nope") is None


ORACLES = ("oue", "sue", "olh", "blh", "ss", "hr", "set-valued")


@pytest.mark.parametrize("name", ORACLES)
def test_the_frequency_oracles_are_registered(name: str) -> None:
    fields = {"max_items": 2, "inner": "hr"} if name == "set-valued" else {}
    params = make_params(name, epsilon=1.0, domain=6, fields=fields)
    spec = registry.spec_for(params)
    assert spec is registry.spec_named(name) and spec.name == name == type(params).name
    assert spec.kind is Kind.SUPPORT and spec.takes_domain
    assert registry.spec_for_member(spec.wire.campaign) is spec


def test_every_parameter_class_is_registered() -> None:
    # Every layer reaches every mechanism through its spec: no transitional fallback for unported ones.
    static_types = get_args(params_facade.MechanismParams)
    assert set(static_types) <= {s.params_type for s in registry.SPECS}
    assert not hasattr(params_facade, "UnportedParams")
    # The user-facing order is the registry's, which is the Campaign oneof's declaration order; the static
    # MechanismName (a typing aid, with MechanismParams) names the mechanisms of params.py in that order,
    # and a mechanism added later by its own module and one registry line follows them.
    members = [f.name for f in campaign_pb2.Campaign.DESCRIPTOR.oneofs_by_name["mechanism"].fields]
    assert [s.wire.campaign for s in registry.SPECS] == members
    static_names = get_args(params_facade.MechanismName)
    assert registry.names() == MECHANISM_NAMES and MECHANISM_NAMES[: len(static_names)] == static_names
    assert [s.params_type for s in registry.SPECS[: len(static_names)]] == list(static_types)


def test_unknown_names_say_what_is_allowed() -> None:
    with pytest.raises(InvalidParameterError) as info:
        registry.spec_named("nope")
    assert info.value.field == "mechanism" and info.value.value == "nope"
    assert "rr, grr" in info.value.allowed
    with pytest.raises(InvalidParameterError) as info:
        registry.spec_for(object())
    assert info.value.field == "params" and info.value.value == "object" and "rr, grr" in info.value.allowed
    with pytest.raises(InvalidParameterError) as info:
        registry.spec_for_member("grr_indices")
    assert info.value.field == "mechanism" and "rr, grr" in info.value.allowed
    assert registry.find_named(3) is None and registry.find_member(None) is None


def test_mechanism_names_keep_their_order() -> None:
    released = (
        "rr", "grr", "rappor", "basic-rappor", "boolean-rappor", "oue", "sue", "olh", "blh", "ss", "hr",
        "set-valued", "laplace", "duchi", "piecewise", "hybrid", "sr", "multidim", "paired",
    )  # fmt: skip
    # The released mechanisms in their order, then any registered later, in registry order.
    added = tuple(name for name in registry.names() if name not in released)
    assert released + added == MECHANISM_NAMES
    with pytest.raises(InvalidParameterError) as info:
        make_params("nope")
    assert info.value.allowed == "one of " + ", ".join(MECHANISM_NAMES)


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


@pytest.mark.parametrize("spec", registry.SPECS, ids=lambda s: s.name)
def test_mechanism_modules_never_import_the_registry_or_the_params_facade(spec: object) -> None:
    # The registry imports the mechanism modules and params.py imports the registry: an import back, even
    # inside a function, would be a cycle.
    module = importlib.import_module(type(spec).__module__)
    assert module.__file__ is not None
    imported = _imported_modules(Path(module.__file__))
    for facade in ("ldp_client.registry", "ldp_client.params", "ldp_client.wire"):
        assert facade not in imported, f"{module.__name__} imports {facade}"
    assert "ldp_client.mechanisms" not in {n for n in imported if n.count(".") == 1}, (
        "import the mechanism modules themselves, not the package (it imports every encoder)"
    )


@pytest.mark.parametrize("spec", registry.SPECS, ids=lambda s: s.name)
def test_a_mechanism_that_needs_the_client_secret_keeps_state_per_device(spec: Any) -> None:
    # A device whose reports depend on its secret (a cohort, a level or group, a memoized response) is one
    # user: a simulation must give every simulated user a client of its own (per_device_state), or one
    # Reporter would put them all in the same cohort, level or group.
    if any(spec.needs_secret(params) for params in spec.examples()):
        assert spec.per_device_state, f"{spec.name} needs the client secret but declares no per-device state"


FAMILY = ("rappor", "basic-rappor", "boolean-rappor", "paired")
FAMILY_CLASSES = {"RapporParams", "BasicRapporParams", "BooleanRapporParams", "PairedParams"}
FAMILY_MEMBERS = {"rappor", "basic_rappor", "boolean_rappor", "basic_bits", "boolean_bits", "paired"}
# The layers that reach a mechanism through its spec only (issue 14): no class or name of these four.
FACADES = (
    "ldp_client/wire.py",
    "ldp_client/_journal_rows.py",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "ldp_client" / "reporter").glob("*.py")),
    "ldp_aggregator/accumulators.py",
    "ldp_aggregator/analysis.py",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "simulations" / "runners").glob("*.py")),
    "simulations/metrics.py",
)


def test_the_rappor_family_and_paired_are_registered() -> None:
    for name in FAMILY:
        spec = registry.spec_named(name)
        assert spec.params_type.name == name and spec in registry.SPECS
    assert [registry.spec_named(n).kind for n in FAMILY] == [
        Kind.RAPPOR,
        Kind.SUPPORT,
        Kind.SUPPORT,
        Kind.PAIRED,
    ]
    # Paired composes the side specs: listed after every one of them.
    where = {s.name: i for i, s in enumerate(registry.SPECS)}
    assert all(where["paired"] > where[side.name] for side in SIDE_SPECS)


@pytest.mark.parametrize("path", FACADES)
def test_the_layers_reach_the_rappor_family_and_paired_only_through_their_specs(path: str) -> None:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    named = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            named.add(node.id)
        elif isinstance(node, ast.alias):
            named.add(node.asname or node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            named.add(node.value)
    assert not named & (FAMILY_CLASSES | set(FAMILY) | FAMILY_MEMBERS), (
        f"{path} names {named & (FAMILY_CLASSES | set(FAMILY) | FAMILY_MEMBERS)}"
    )
