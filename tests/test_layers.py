"""The layer rule, checked on the imports read from the code.

Every ``import`` and ``from ... import`` of every module under ``src/kant`` is read with :mod:`ast`:
those at the top of a module, those under ``if TYPE_CHECKING:`` and those deferred inside functions
all count (a deferred import is still a dependency, only a later one). Nothing here lists an edge by
hand: the graph is the code's. Three rules are checked on it:

1. **No import circles**: no two modules import each other, directly or through others (strongly
   connected components of the module graph).
2. **No upward imports**: a room imports only rooms of a lower layer, never one of its own layer or
   above. A *room* is a top-level package or module of ``src/kant``; the layers, from the ground up,
   are declared once, in :data:`LAYERS`::

       0  errors                          the error types every room raises
       1  text, stamp, policies,          small helpers (text, the version-stamped cache); bundled YAML;
          model_server                    the example model server (python -m kant.model_server)
       2  model                           domain types: cluster, jobs, job store, cluster state
       3  framework                       the contract for plugins and actions, the runner, the registry
       4  config                          policy files: actions and plugins by name, typed arguments
       5  plugins, actions, traces        policies; cycle algorithms; trace readers and the schema
       6  scheduler, metrics              one scheduling cycle; the recorder and the summaries
       7  instant                         the instant rule both drivers follow (events, then one cycle)
       8  sim                             event kernel, execution model, the Simulator
       9  inference                       services, traffic, autoscaler, the unified driver
       10 runs                            use cases: one simulation run as the CLI and sweeps ask for it
       11 twin, sweep, experiments        the digital twin, studies, the FGD reproduction
       12 service                         ``kant serve``: database, loop, executors, REST API, dashboard
       13 cli                             ``kant ...`` commands

   Why this order: ``config`` loads a policy by resolving names through ``framework``'s registry, and
   plugins may build policies (``quota.with_tenant_quotas``), so it sits between the two; ``traces``
   validates mapping files with ``config`` and knows nothing of scheduling; ``sim`` records through
   ``metrics.recorder``; ``inference``'s unified driver is a simulator; ``runs`` is what the CLI,
   sweeps and the twin share; the service drives the scheduler and asks the twin. Rooms of one layer
   are independent: they import none of each other.
3. **No private names across modules**: no module imports a name starting with ``_`` from another
   module (``from m import _x``; dunders such as ``__version__`` aside), and a private module
   (``kant.traces._csv``) is imported only from inside its own package. What another module needs
   is made public in the right room.

The package ``kant`` itself (``src/kant/__init__.py``) is the public facade: its lazy exports
import from every layer and are exempt, and ``from kant import X`` counts as an import of the module
that defines ``X`` (its ``_WHERE`` table). Plugin and action modules that the registry imports by
name (``importlib``) are no import edge: the registry finds them, it does not depend on them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import kant

#: the rooms of src/kant, from the ground up (see the module docstring); one layer per tuple
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("text", "stamp", "policies", "model_server"),
    ("model",),
    ("framework",),
    ("config",),
    ("plugins", "actions", "traces"),
    ("scheduler", "metrics"),
    ("instant",),
    ("sim",),
    ("inference",),
    ("runs",),
    ("twin", "sweep", "experiments"),
    ("service",),
    ("cli",),
)
FACADE = "kant"
SRC = Path(kant.__file__).parent


@dataclass(frozen=True)
class Import:
    """One import statement of a module, as the code has it."""

    importer: str  # module that imports
    module: str  # kant module it imports (a package's __init__ is the package's name)
    names: tuple[str, ...]  # names taken from it (empty for `import x`)
    file: str  # src/kant/...
    line: int
    text: str

    def where(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


def modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Every module under ``root`` (the ``kant`` package folder): name -> (file, is a package)."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts.pop()
        found[".".join(parts)] = (path, package)
    return found


def facade_table(root: Path) -> dict[str, str]:
    """The facade's lazy exports: public name -> defining module (``_WHERE`` in kant/__init__.py)."""
    tree = ast.parse((root / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_WHERE" for t in node.targets):
            table = ast.literal_eval(node.value)
            assert isinstance(table, dict)
            return {str(k): str(v) for k, v in table.items()}
    return {}


def read_imports(root: Path) -> list[Import]:
    """Every import of a kant module by another kant module under ``root`` (facade rules applied)."""
    mods = modules(root)
    facade = facade_table(root)
    top = root.name
    out: list[Import] = []
    for name, (path, package) in mods.items():
        if name == FACADE:
            continue  # the public facade's lazy exports are exempt
        source = path.read_text()
        lines = source.splitlines()
        file = "src/" + path.relative_to(root.parent).as_posix()
        base = name if package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(source)):
            text = lines[node.lineno - 1].strip() if hasattr(node, "lineno") else ""
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = alias.name
                    while target and target not in mods:
                        target = target.rpartition(".")[0]
                    if target and target != name and target != FACADE and target.split(".")[0] == top:
                        out.append(Import(name, target, (), file, node.lineno, text))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = base.split(".")
                    parts = parts[: len(parts) - node.level + 1]
                    source_mod = ".".join(parts + ([node.module] if node.module else []))
                else:
                    source_mod = node.module or ""
                if source_mod.split(".")[0] != top:
                    continue
                taken: dict[str, list[str]] = {}  # kant module -> the names this statement takes from it
                for alias in node.names:
                    if source_mod == FACADE:
                        target = facade.get(alias.name, "")
                        if not target:
                            continue  # a name the facade defines itself (__version__, lazy_exports)
                    elif f"{source_mod}.{alias.name}" in mods:
                        target = f"{source_mod}.{alias.name}"  # a submodule (from kant.traces import azure)
                    else:
                        target = source_mod
                    while target and target not in mods:
                        target = target.rpartition(".")[0]
                    if target and target != name:
                        names = taken.setdefault(target, [])
                        if target != f"{source_mod}.{alias.name}":
                            names.append(alias.name)
                out += [Import(name, target, tuple(names), file, node.lineno, text) for target, names in taken.items()]
    return out


def room(module: str) -> str:
    """The room of a module: its top-level package or module under ``kant``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def circles(imports: list[Import]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        graph.setdefault(imp.importer, set()).add(imp.module)
        graph.setdefault(imp.module, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # recursion depth is bounded by the number of modules (~200)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def layer_of(layers: tuple[tuple[str, ...], ...]) -> dict[str, int]:
    return {r: i for i, rooms in enumerate(layers) for r in rooms}


def upward(imports: list[Import], layers: tuple[tuple[str, ...], ...]) -> list[tuple[Import, int, int]]:
    """Imports of a room at the importer's own layer or above: (import, importer's layer, imported's)."""
    level = layer_of(layers)
    bad = []
    for imp in imports:
        a, b = room(imp.importer), room(imp.module)
        if a != b and a in level and b in level and level[b] >= level[a]:
            bad.append((imp, level[a], level[b]))
    return bad


def private(imports: list[Import]) -> list[Import]:
    """Imports of a private name from another module, or of a private module from outside its package."""
    bad = []
    for imp in imports:
        if any(n.startswith("_") and not n.endswith("__") for n in imp.names):
            bad.append(imp)
            continue
        parts = imp.module.split(".")
        for i, part in enumerate(parts):
            owner = ".".join(parts[:i])
            if part.startswith("_") and not (imp.importer == owner or imp.importer.startswith(owner + ".")):
                bad.append(imp)
                break
    return bad


def _fail(title: str, rows: list[str]) -> None:
    """Fail with one line per violation under ``title`` (nothing if there is none)."""
    if rows:
        pytest.fail(title + "\n" + "\n".join("  " + r for r in rows), pytrace=False)


# --- the rules, on this code ---------------------------------------------------------------------
IMPORTS = read_imports(SRC)


def test_every_room_has_a_layer() -> None:
    rooms = {room(m) for m in modules(SRC) if m != FACADE}
    undeclared = sorted(rooms - set(layer_of(LAYERS)))
    _fail("rooms without a layer (add each to LAYERS in tests/test_layers.py, above every room it imports and "
          "below every room that imports it):", undeclared)


def test_no_import_circles() -> None:
    rows = []
    for comp in circles(IMPORTS):
        rows.append(" <-> ".join(comp))
        members = set(comp)
        rows += ["    " + imp.where() for imp in IMPORTS if imp.importer in members and imp.module in members]
    _fail("import circles (these modules import each other, directly or through others; share code by moving "
          "it down, or type against a Protocol of the lower module):", rows)


def test_no_upward_imports() -> None:
    rows = [f"{room(imp.importer)} (layer {a}) imports {room(imp.module)} (layer {b}): {imp.where()}"
            for imp, a, b in upward(IMPORTS, LAYERS)]
    _fail("imports against the layer order (a room imports only rooms of lower layers; LAYERS in "
          "tests/test_layers.py):", rows)


def test_no_private_names_imported_from_another_module() -> None:
    rows = [imp.where() for imp in private(IMPORTS)]
    _fail("private names imported from another module (make them public in the right room):", rows)


# --- the checks themselves, on a made-up package -------------------------------------------------
def _package(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "kant"
    for rel, text in {"__init__.py": "_WHERE = {'Thing': 'kant.high.thing'}\n", **files}.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pkg


def test_the_checks_see_every_kind_of_import(tmp_path: Path) -> None:
    pkg = _package(tmp_path, {
        "low/__init__.py": "",
        "low/a.py": ("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    from kant.low.b import B\n"),  # a circle through TYPE_CHECKING
        "low/b.py": "from .a import A\nfrom kant.low._hidden import x\n",  # relative; private module, inside
        "low/_hidden.py": "",
        "mid.py": "def f():\n    from kant.high.thing import _secret\n",  # deferred, upward and private
        "high/__init__.py": "",
        "high/thing.py": "from kant import Thing, __version__\nfrom kant.low._hidden import x\n",
    })
    imports = read_imports(pkg)
    assert circles(imports) == [["kant.low.a", "kant.low.b"]]
    layers = (("low",), ("mid",), ("high",))
    assert [(i.importer, i.module, a, b) for i, a, b in upward(imports, layers)] == [
        ("kant.mid", "kant.high.thing", 1, 2)]
    # `from kant import Thing` is an import of the module defining Thing: itself, so no edge
    assert [(i.importer, i.module) for i in private(imports)] == [
        ("kant.high.thing", "kant.low._hidden"), ("kant.mid", "kant.high.thing")]
