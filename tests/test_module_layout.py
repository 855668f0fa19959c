"""The shape of the code: split packages keep their public names, modules stay small, imports stay acyclic.

Imports are read from the source (every ``import``, including those inside functions, which hide a cycle
but do not remove it), so these tests need no import side effects and run in a fraction of a second.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ldp_client", "ldp_aggregator", "simulations")
#: Hand-written modules of the split packages stay well below the size of the modules they replaced.
MAX_MODULE_LINES = 700


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _sources() -> dict[str, Path]:
    """Module name -> file, for the hand-written modules of the three packages (not generated code)."""
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "_proto" in path.parts:
                continue
            out[_module_name(path)] = path
    return out


@cache
def _import_graph() -> dict[str, frozenset[str]]:
    """Module -> the project modules it imports (anywhere in its body), its own parent packages excluded."""
    modules = _sources()
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*parts, base]) if base else ".".join(parts)
                candidates = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            for candidate in candidates:
                target = candidate
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    targets.add(target)
        graph[name] = frozenset(targets)
    return graph


def _cycles() -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    graph = _import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(component)
    return components


# Packages split out of single modules.
SPLIT_PACKAGES = (
    "ldp_aggregator.store",
    "ldp_aggregator.rappor_decode",
    "ldp_client.mechanisms.numeric",
    "ldp_client.mechanisms.rappor",
)
# Modules taken out of an import cycle (the numeric mechanisms' accumulator, estimator and what they share).
ACYCLIC_MODULES = ("ldp_aggregator.means", "ldp_aggregator.moments", "ldp_aggregator.estimation")


def _must_be_acyclic(module: str) -> bool:
    """The split packages' modules, a few named modules and both command lines' modules (cli, cli_app,
    cli_* of each)."""
    if module.startswith(tuple(p + "." for p in SPLIT_PACKAGES)) or module in SPLIT_PACKAGES:
        return True
    if module in ACYCLIC_MODULES:
        return True
    package, _, name = module.rpartition(".")
    return package in ("ldp_aggregator", "simulations") and (name == "cli" or name.startswith("cli_"))


def test_the_cycle_finder_sees_imports_inside_functions() -> None:
    graph = _import_graph()
    # service.py imports the store at module level and RAPPOR decoding inside a method.
    assert "ldp_aggregator.store" in graph["ldp_aggregator.service"]
    service_imports = graph["ldp_aggregator.service"]
    assert any(target.startswith("ldp_aggregator.rappor_decode") for target in service_imports)


@pytest.mark.parametrize("package", SPLIT_PACKAGES)
def test_split_packages_are_packages_of_small_modules(package: str) -> None:
    path = ROOT / package.replace(".", "/")
    assert (path / "__init__.py").is_file(), f"{package} is not a package"
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in sorted(path.glob("*.py"))}
    assert len(sizes) >= 3, sizes
    assert max(sizes.values()) <= MAX_MODULE_LINES, sizes


@pytest.mark.parametrize("package", SPLIT_PACKAGES)
def test_split_packages_re_export_their_public_names(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__, package
    for name in module.__all__:
        assert hasattr(module, name), f"{package}.{name}"
        value = getattr(module, name)
        if inspect.isclass(value) or inspect.isfunction(value):  # defined in the package's own modules
            assert value.__module__.startswith(package + "."), (name, value.__module__)


def test_no_import_cycle_through_the_split_packages_and_the_command_lines() -> None:
    offending = [sorted(c) for c in _cycles() if any(_must_be_acyclic(m) for m in c)]
    assert offending == []
    assert _must_be_acyclic("ldp_aggregator.cli_decode") and _must_be_acyclic("simulations.cli")
    assert _must_be_acyclic("ldp_aggregator.means") and _must_be_acyclic("ldp_client.mechanisms.numeric.base")
    assert not _must_be_acyclic("ldp_aggregator.client_access")


def test_no_import_cycle_anywhere() -> None:
    """Issue 14: with every mechanism behind the registry, no two modules of the three packages import each
    other, directly or through others, at module level or inside functions."""
    assert [sorted(c) for c in _cycles()] == []


def test_modules_of_a_split_package_never_import_the_package_itself() -> None:
    """A submodule importing its own package would run the package's re-exports half-initialised."""
    for package in SPLIT_PACKAGES:
        for name, path in _sources().items():
            if not name.startswith(package + "."):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.level == 0:
                    assert node.module != package, f"{name} imports {package}"


def test_no_import_cycle_through_auto_the_parameters_or_the_frequency_oracles() -> None:
    """auto compares the registered specs without importing the parameter facade (which imports auto), and
    the oracles' support counts and estimates go through their specs: no aggregator module of their own
    sits in the accumulators/estimators knot."""
    graph = _import_graph()
    assert "ldp_client.params" not in graph["ldp_client.auto"]
    assert "ldp_aggregator.oracles" not in graph, "the one pure-oracle estimator serves the oracles"
    oracle_modules = {
        "ldp_client.auto",
        "ldp_client.params",
        "ldp_client._oracle_choice",
        "ldp_aggregator.support",
        *(m for m in graph if m.startswith("ldp_client.mechanisms.")),
    }
    offending = [sorted(c) for c in _cycles() if c & oracle_modules]
    assert offending == []


# Issue 14: the paired mechanism's codec composes its sides' specs (no ldp_client._paired_wire calling back
# into ldp_client.wire), and its accumulator is a layout the accumulators module lists (it no longer
# imports that module back).
PAIRED_AND_RAPPOR = (
    "ldp_client.wire",
    "ldp_client.mechanisms.paired",
    "ldp_aggregator.paired_accumulator",
    "ldp_aggregator.association",
    "ldp_client.mechanisms.rappor",
)


def test_no_import_cycle_through_the_paired_and_rappor_modules() -> None:
    def ours(module: str) -> bool:
        return module in PAIRED_AND_RAPPOR or module.startswith("ldp_client.mechanisms.rappor.")

    offending = [sorted(c) for c in _cycles() if any(ours(m) for m in c)]
    assert offending == []
    assert "ldp_aggregator.accumulators" not in _import_graph()["ldp_aggregator.paired_accumulator"]


# ------------------------------------------- issue 14: behaviour chosen by kind and layout, not mechanism

_MECHANISM_CLASS_SUFFIXES = ("Params", "Encoder", "Accumulator", "Spec")


def _mechanism_words() -> frozenset[str]:
    """Every registered mechanism's name and ``ldp.v1`` oneof members (what a name comparison would test)."""
    from ldp_client import registry

    return frozenset(
        w for s in registry.SPECS for w in (s.name, s.wire.campaign, s.wire.batch, s.wire.report)
    )


def _class_names(node: ast.expr) -> list[str]:
    """The classes an isinstance target names: one, a tuple of them, or a union ``A | B``."""
    if isinstance(node, ast.Tuple):
        return [name for element in node.elts for name in _class_names(element)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _class_names(node.left) + _class_names(node.right)
    if isinstance(node, ast.Attribute):
        return [node.attr]
    return [node.id] if isinstance(node, ast.Name) else []


def _own_nodes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    """The nodes of a function's body, not those of the functions defined inside it (counted on their own)."""
    out: list[ast.AST] = []
    work: list[ast.AST] = list(function.body)
    while work:
        node = work.pop()
        out.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            work.extend(ast.iter_child_nodes(node))
    return out


def _mechanisms_chosen_by(
    function: ast.FunctionDef | ast.AsyncFunctionDef, words: frozenset[str]
) -> set[str]:
    """The mechanism-like classes a function tests with isinstance and the mechanism names it compares."""
    seen: set[str] = set()
    for node in _own_nodes(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            if len(node.args) == 2:
                seen.update(n for n in _class_names(node.args[1]) if n.endswith(_MECHANISM_CLASS_SUFFIXES))
        elif isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                elements = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
                seen.update(e.value for e in elements if isinstance(e, ast.Constant) and e.value in words)
    return seen


def test_no_function_chooses_behaviour_by_three_or_more_mechanisms() -> None:
    """Every layer reaches a mechanism through its spec and branches on kinds and layouts: no function of
    the three packages tests three or more mechanisms' classes (isinstance, with tuples and unions) or
    names (string comparisons)."""
    words = _mechanism_words()
    sites = []
    for name, path in _sources().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                chosen = _mechanisms_chosen_by(node, words)
                if len(chosen) >= 3:
                    sites.append(f"{name}.{node.name} (line {node.lineno}): {', '.join(sorted(chosen))}")
    assert sites == []
