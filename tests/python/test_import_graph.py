"""The package imports top-down: no module of python/spatialgrad imports, at any depth and in any function, a
module that imports it back (issue 46). The modules a circle ties together are half-initialised while they run,
so a name read at import time may not exist yet; the order that holds instead is: _args, _strict, bfloat16 (and the
binding _core) -> _declare -> functional/<op>.py -> functional -> _registry -> autograd, ascend -> torch.

Read from the source (ast), so it needs no build: every import statement, at module level or inside a function,
resolved as Python resolves it; ``from package import name`` is an edge to the submodule ``name`` where there is
one, else to the package's __init__.py (the usual reading: a submodule's parent package is not an edge).
"""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "spatialgrad"


def module_name(path: Path) -> str:
    parts = ("spatialgrad",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules():
    """{module name: its file} for every .py of the package, plus the binding (its stub names it)."""
    found = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    found["spatialgrad._core"] = PACKAGE / "_core.pyi"
    return found


def is_package(name: str, known) -> bool:
    return known[name].name == "__init__.py"


def imports_of(name: str, path: Path, known):
    """The package's modules that the file at ``path`` (module ``name``) imports."""
    package = name if is_package(name, known) else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        yield from (t for t in targets if t in known and t != name)


def circles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def import_graph():
    known = modules()
    return {name: set(imports_of(name, path, known)) if path.suffix == ".py" else set()
            for name, path in known.items()}


def test_the_reader_sees_the_layers_the_docstring_names():
    graph = import_graph()
    assert "spatialgrad._declare" in graph["spatialgrad.functional.roi_align"]
    assert "spatialgrad._strict" in graph["spatialgrad.functional.roi_align"]
    assert "spatialgrad.functional.roi_align" in graph["spatialgrad.functional"]
    assert "spatialgrad.functional" in graph["spatialgrad._registry"]
    assert "spatialgrad._registry" in graph["spatialgrad.ascend"]
    assert "spatialgrad._core" in graph["spatialgrad.ascend"]


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_circle():
    assert circles(import_graph()) == []
