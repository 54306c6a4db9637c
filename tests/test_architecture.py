"""The layering, read from the source with `ast`: imports point down (cli -> registry -> encoder /
indexing), `encoder/` and `indexing/` never import `registry` or `cli`, and no module imports
another that imports it back (directly or through others, counting imports inside functions too)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cli", "registry", "encoder", "indexing")
LOWER = ("encoder", "indexing")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Project modules `name` imports anywhere in its file (resolving relative imports and
    `from package import module`); TYPE_CHECKING-only imports are left out (they never run)."""
    tree = ast.parse(path.read_text("utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            skip.update(id(n) for child in node.body for n in ast.walk(child))
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        out.update(t for t in targets if t in known and t != name)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def test_lower_layers_never_import_registry_or_cli():
    bad = [f"{module} imports {target}" for module, targets in _graph().items()
           if module.split(".")[0] in LOWER for target in targets if target.split(".")[0] in ("registry", "cli")]
    assert not bad, bad


def test_registry_never_imports_cli():
    bad = [f"{m} imports {t}" for m, ts in _graph().items() if m.startswith("registry") for t in ts
           if t.startswith("cli")]
    assert not bad, bad


def test_no_import_cycles():
    graph = _graph()
    cycles, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, cycles


def test_the_graph_sees_known_edges():
    """The parser finds imports at module level and inside functions (a test that cannot fail is none)."""
    graph = _graph()
    assert "indexing.errors" in graph["indexing.store"]
    assert "registry.catalog.models" in graph["registry.api"]  # imported inside a method
    assert "registry.results" in graph["registry"]


# Rooms inside registry/: the catalog (what is stored and how it changes) is below the analytics (queries
# over it); both are below the faces (api, operations, the service, the client); the lab (evaluation,
# geometry, synthetic pools, the demo) measures the product and is imported only by the API's `evaluate`
# and the CLI's `demo`, never by the product's own rooms.
_FACES = ("registry.api", "registry.operations", "registry.client", "registry.snapshot", "registry.service")


def _inside(module: str, *rooms: str) -> bool:
    return any(module == room or module.startswith(room + ".") for room in rooms)


def test_registry_rooms_import_downwards():
    graph = _graph()
    rules = [
        ("registry.catalog", ("registry.analytics", "registry.lab", *_FACES)),
        ("registry.analytics", ("registry.lab", *_FACES)),
        ("registry.importers", ("registry.catalog", "registry.analytics", "registry.lab", *_FACES)),
    ]
    bad = [f"{m} imports {t}" for room, banned in rules for m, ts in graph.items() if _inside(m, room)
           for t in ts if _inside(t, *banned)]
    assert not bad, bad


def test_only_evaluate_and_demo_reach_the_lab():
    graph = _graph()
    bad = [f"{m} imports {t}" for m, ts in graph.items() for t in ts
           if _inside(t, "registry.lab") and not _inside(m, "registry.lab", "registry.api", "cli.main")]
    assert not bad, bad
    assert "registry.lab.evaluation" in graph["registry.api"]  # the rule sees the one edge it allows
