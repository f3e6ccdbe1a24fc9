"""The harness's data flows one way: no import circle, and no lower layer importing a higher one.

Every import of a solbench module by another counts, including imports inside functions (a lazy import
still ties the two modules together). The layer table below is the architecture in README.md: a new
module must be given its place here, which is the point.
"""

from __future__ import annotations

import ast
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent / "solbench"

# Lowest first. A module may import modules of its own layer or of lower layers only.
LAYERS: list[set[str]] = [
    {"errors", "paths", "expr", "dtypes", "stats", "jsonio", "__init__", "torch_ops", "counters"},
    {"spec", "nvml", "ncu"},
    {"hardware", "telemetry", "results", "sol", "check", "calibration", "noise_model"},
    {"measure"},
    {"integrity", "calibrate", "cpu_ceilings", "peaks", "noise_calibrate"},
    {"job"},
    {"registry", "inputs", "traps", "preflight"},
    {"worker", "profile_target"},
    {"exec"},
    {"plan", "pipeline", "resume", "fleet", "runrequest", "counting", "ceiling_recheck"},
    {"console", "compare", "compare_render", "compare_aa", "verdict", "charts", "chartlabels", "roofline", "solchart", "report",
     "doctor", "envprobe", "audit"},
    {"serve", "remote"},
    {"cli", "__main__"},
]
MAX_LINES = 400


def _unit(module: str) -> str:
    """The layer unit of a dotted module name below solbench: a package counts as one unit."""
    return module.split(".")[0]


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(path: Path, module: str) -> set[str]:
    """solbench modules this file imports (dotted names below solbench)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module.split(".")[:-1] if path.name != "__init__.py" else module.split(".")
    found: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("solbench."):
                    found.add(a.name.removeprefix("solbench."))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            elif node.module and (node.module == "solbench" or node.module.startswith("solbench.")):
                name = node.module.removeprefix("solbench").lstrip(".")
            else:
                continue
            if name:
                found.add(name)
            else:  # from solbench import a, b
                found.update(a.name for a in node.names)
    return found


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under `if TYPE_CHECKING:` (annotations only: they never run)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for child in node.body for n in ast.walk(child))
    return [n for n in ast.walk(tree) if id(n) not in skipped]


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    units = {_unit(m) for m in mods}
    # `from solbench import __version__` names an attribute, not a module: only modules count.
    return {m: {i for i in _imports(p, m) if _unit(i) in units and i != m} for m, p in mods.items()}


def _layer(unit: str) -> int:
    for i, layer in enumerate(LAYERS):
        if unit in layer:
            return i
    raise AssertionError(f"solbench/{unit} is in no layer of tests/test_layers.py: give it its place")


def test_every_module_has_a_layer():
    for m in _modules():
        _layer(_unit(m))


def test_no_lower_layer_imports_a_higher_one():
    bad = []
    for m, deps in _graph().items():
        for d in deps:
            if _layer(_unit(d)) > _layer(_unit(m)):
                bad.append(f"{m} (layer {_layer(_unit(m))}) imports {d} (layer {_layer(_unit(d))})")
    assert not bad, "\n".join(sorted(bad))


def _unit_graph() -> dict[str, set[str]]:
    units: dict[str, set[str]] = {}
    for m, deps in _graph().items():
        units.setdefault(_unit(m), set()).update(_unit(d) for d in deps if _unit(d) != _unit(m))
    return units


def find_circle(units: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the unit graph, as a path that returns to its start; None if there is none."""
    state: dict[str, int] = {}       # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(u: str) -> list[str] | None:
        state[u] = 1
        path.append(u)
        for v in sorted(units.get(u, ())):
            if state.get(v) == 1:
                return path[path.index(v):] + [v]
            if v not in state and (found := visit(v)):
                return found
        path.pop()
        state[u] = 2
        return None

    for u in sorted(units):
        if u not in state and (found := visit(u)):
            return found
    return None


def test_no_import_circle():
    circle = find_circle(_unit_graph())
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_the_circle_finder_finds_a_planted_circle():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_modules_stay_small_or_say_why():
    """No module over MAX_LINES lines without the reason in its docstring ("over 400 lines because")."""
    long = []
    for m, path in _modules().items():
        lines = path.read_text().count("\n")
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if lines > MAX_LINES and f"over {MAX_LINES} lines" not in doc:
            long.append(f"solbench/{path.relative_to(ROOT)}: {lines} lines")
    assert not long, "\n".join(long)


def test_imports_inside_functions_count(tmp_path):
    """A lazy import ties two modules together as much as a top-level one."""
    (tmp_path / "b.py").write_text("def f():\n    from solbench.a import x\n    from . import c\n")
    assert _imports(tmp_path / "b.py", "b") == {"a", "c"}
