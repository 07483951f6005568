"""The house holds: imports run one way (import-linter), no function-level ``workrun`` import below the top
layer, no import cycle at all, outcomes not read from messages, and ``__all__`` pinned to what is exposed."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "workrun"
TOP_LAYER = ("cli", "ui", "api", "app")  # lazy imports downward keep start-up fast (issue 12)
MESSAGE_NAMES = ("error", "reason", "message", "answer", "text", "detail", "msg", "stderr")


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        out[name] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return out


def _imported(node: ast.AST, module: str) -> list[str]:
    """``workrun`` modules named by an import statement (``from X import y`` may name module ``X.y``)."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return [n for n in names if n == "workrun" or n.startswith("workrun.")]


def _function_imports(tree: ast.Module) -> list[tuple[int, str]]:
    found = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                for name in _imported(node, ""):
                    found.append((node.lineno, name))
    return found


def test_import_linter_contracts_hold():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.fail("lint-imports is not installed in this environment (it is in the test extra)")
    proc = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_no_function_level_workrun_import_below_the_top_layer():
    offenders = [f"{name}:{line} imports {target}" for name, tree in _modules().items()
                 if name.split(".")[1:2] and name.split(".")[1] not in TOP_LAYER or name == "workrun"
                 for line, target in _function_imports(tree)]
    assert offenders == []


def test_no_import_cycle_counting_imports_inside_functions():
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, tree in modules.items():
        targets = set()
        for node in ast.walk(tree):
            for target in _imported(node, name):
                while target not in modules and "." in target:  # ``from pkg import name`` of a non-module
                    target = target.rsplit(".", 1)[0]
                if target in modules and target != name and not name.startswith(target + "."):
                    targets.add(target)
        graph[name] = targets
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(module: str, trail: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                cycles.append([*trail[trail.index(dep):], dep])
            elif dep not in state:
                visit(dep, [*trail, dep])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    # a package's __init__ re-exporting its submodules is not a cycle of code: ignore parent -> child edges
    real = [c for c in cycles
            if not all(b.startswith(a + ".") or a.startswith(b + ".") for a, b in zip(c, c[1:], strict=False))]
    assert real == []


def _is_message(node: ast.AST) -> bool:
    """``x.error``, ``x["reason"]``, ``message`` ... possibly wrapped as ``(x or "")``."""
    if isinstance(node, ast.BoolOp):
        return any(_is_message(v) for v in node.values)
    if isinstance(node, ast.Attribute):
        return node.attr in MESSAGE_NAMES
    if isinstance(node, ast.Name):
        return node.id in MESSAGE_NAMES
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.slice.value in MESSAGE_NAMES
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str":
        return any(_is_message(a) for a in node.args)
    return False


def test_no_outcome_is_decided_by_reading_a_message():
    """No ``if`` (or ``while``/conditional expression) tests ``.startswith(...)``/``in`` on an error, reason or
    message: failures are :class:`workrun.core.outcomes.Failure` values stored in the journal."""
    offenders = []
    for name, tree in _modules().items():
        for test in (n.test for n in ast.walk(tree) if isinstance(n, (ast.If, ast.While, ast.IfExp))):
            for node in ast.walk(test):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr in ("startswith", "endswith") and _is_message(node.func.value):
                    offenders.append(f"{name}:{node.lineno}")
                if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                        and any(_is_message(c) for c in node.comparators):
                    offenders.append(f"{name}:{node.lineno}")
    assert offenders == []


@pytest.mark.parametrize("module", ["workrun", "workrun.core.errors", "workrun.journal", "workrun.runner",
                                    "workrun.nodes", "workrun.compensation", "workrun.core.outcomes", "workrun_sdk"])
def test_all_is_what_the_package_exposes(module):
    """``__all__`` names every public name the module defines or re-exports, and nothing else but its
    submodules (which a package may load lazily)."""
    mod = importlib.import_module(module)
    public = {n for n, v in vars(mod).items() if not n.startswith("_") and not isinstance(v, type(sys))
              and getattr(v, "__module__", module).startswith(("workrun", "workrun_sdk"))
              and n not in ("annotations",)}
    declared = set(mod.__all__) - {"__version__"}
    submodules = {n for n in declared - public if importlib.util.find_spec(f"{module}.{n}") is not None}
    assert declared - submodules == public
    assert all(getattr(mod, n) is not None for n in mod.__all__)


def test_the_house_is_at_most_nine_layers_of_packages():
    """Issue 27: packages as layers (≤ 9), not a flat top level; only the public entry points are modules there."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    house = next(c for c in contracts if c["name"].startswith("One-way house"))
    assert len(house["layers"]) <= 9, house["layers"]
    named = {part.strip() for layer in house["layers"] for part in layer.replace(":", "|").split("|")}
    packages = {f"workrun.{p.name}" for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages <= named, f"packages outside the house contract: {sorted(packages - named)}"
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    assert modules == {"__init__", "__main__", "api", "testing"}, sorted(modules)


def test_no_untyped_row_crosses_the_journal_boundary():
    """Issue 27: the journal's roles read and write typed rows (``workrun.core.rows``), never ``dict[str, Any]``;
    JSON documents kept in one column are ``JsonObject``, and a role has at most 25 methods."""
    source = (PACKAGE / "journal" / "base.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        methods = [f for f in cls.body if isinstance(f, ast.FunctionDef)]
        assert len(methods) <= 25, f"{cls.name} has {len(methods)} methods"
        for fn in methods:
            annotations = [a.annotation for a in (*fn.args.args, *fn.args.kwonlyargs) if a.annotation] + [fn.returns]
            for ann in filter(None, annotations):
                text = ast.get_source_segment(source, ann) or ""
                assert "dict[str, Any]" not in text and text != "Row", f"{cls.name}.{fn.name}: {text}"
