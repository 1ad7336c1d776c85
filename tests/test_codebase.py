"""The codebase stays readable: imports run one way through the rooms, no import cycle, short
functions and modules, and importing the package leaves the caller's JAX settings alone."""
import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "sweep"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = ast.parse(path.read_text(), str(path))
    return out


def _imports(name: str, tree: ast.Module, modules) -> set[str]:
    """The package's modules ``name`` imports, at any depth of its code (a submodule's package
    runs first, so it counts too)."""
    found = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sweep"):
            targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names if a.name.startswith("sweep")]
        for t in targets:
            parts = t.split(".")
            for i in range(2, len(parts) + 1):
                q = ".".join(parts[:i])
                if q in modules and q != name and not name.startswith(q + "."):
                    found.add(q)
    return found


#: The package's rooms, lowest first: a module may import its own room and the ones below it,
#: never one above (data flows one way: hardware and model, what to simulate, the engine, what
#: results mean, how simulations run, the questions asked of many runs, the interfaces).
ROOMS = [("sweep.errors", "sweep.files", "sweep.version", "sweep.runtime"), ("sweep.physics",),
         ("sweep.study",), ("sweep.engine", "sweep.twin"), ("sweep.analysis",),
         ("sweep.execution",), ("sweep.workflows",),
         ("sweep.api", "sweep.commands", "sweep.cli", "sweep")]


def _room(module: str) -> int:
    for level, names in enumerate(ROOMS):
        if any(module == n or (n != "sweep" and module.startswith(n + ".")) for n in names):
            return level
    raise AssertionError(f"{module}: in no declared room")


def test_imports_run_one_way_through_the_rooms():
    modules = _modules()
    uphill = [f"{m} -> {n}" for m, t in modules.items() for n in sorted(_imports(m, t, modules))
              if _room(n) > _room(m)]
    assert uphill == [], "imports from a lower room to a higher one: " + "; ".join(uphill)


def test_no_import_cycles():
    modules = _modules()
    graph = {m: _imports(m, t, modules) for m, t in modules.items()}
    state: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(m, path):
        state[m] = 1
        for n in sorted(graph[m]):
            assert state.get(n) != 1, "import cycle: " + " -> ".join(path + [m, n])
            if n not in state:
                visit(n, path + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def test_functions_and_modules_are_short():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES:
            long.append(f"{path.name}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.name}:{node.name}: {n} lines")
    assert not long, long


def test_import_leaves_jax_settings_alone():
    out = subprocess.run([sys.executable, "-c", "import jax, sweep, sweep.api; "
                          "print(jax.config.jax_enable_x64)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_readme_is_short():
    readme = PACKAGE.parent / "README.md"
    assert len(readme.read_text(encoding="utf-8")) <= 12_000
