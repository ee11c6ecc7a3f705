"""The package's import graph, read from the sources (nothing is imported): no two modules of ``walflow`` import
each other, directly or through others, at the top of a file, inside a function or for type checking only; and no
module imports from a stage later than its own (``STAGES``, the order of the data flow in ``walflow/__init__.py``)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


def _modules() -> dict[str, Path]:
    found = {}
    for path in (PLUGINS / "walflow").rglob("*.py"):
        parts = path.relative_to(PLUGINS).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the ``walflow`` modules it imports (a name imported from a package counts as the package, or as
    its submodule when it is one)."""
    modules = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in targets:
                module = resolve(target)
                if module is not None and module != name:
                    graph[name].add(module)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


#: walflow's stages, earliest first: a module may import from its own stage and earlier ones, never from a later one
STAGES = (
    ("base", ("walflow", "walflow.errors", "walflow.names", "walflow.resources")),
    ("config", ("walflow.config",)),
    ("source", ("walflow.source",)),
    ("records", ("walflow.records",)),
    ("kafka", ("walflow.kafka",)),
    ("transforms", ("walflow.transforms",)),
    ("capture", ("walflow.capture",)),
    ("lake", ("walflow.lake",)),
    ("airflow", ("walflow.airflow",)),
    ("admin", ("walflow.admin",)),
)


def stage_of(module: str) -> int | None:
    """The index in ``STAGES`` of ``module``'s stage (a package stands for its modules), or None."""
    for index, (_name, roots) in enumerate(STAGES):
        if any(module == root or (root != "walflow" and module.startswith(root + ".")) for root in roots):
            return index
    return None


def later_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a module from a stage after its own, as ``importer (stage) -> imported (stage)``."""
    found = []
    for module in sorted(graph):
        mine = stage_of(module)
        for imported in sorted(graph[module]):
            theirs = stage_of(imported)
            if mine is not None and theirs is not None and theirs > mine:
                found.append(f"{module} ({STAGES[mine][0]}) -> {imported} ({STAGES[theirs][0]})")
    return found


def test_every_module_has_a_stage() -> None:
    homeless = sorted(module for module in import_graph() if stage_of(module) is None)
    assert not homeless, f"modules outside every stage of STAGES (give each a subpackage): {homeless}"


def test_no_module_imports_from_a_later_stage() -> None:
    found = later_imports(import_graph())
    assert not found, "imports against the data flow (move the shared part to the earlier stage): " + "; ".join(found)


def test_a_later_import_is_found_where_there_is_one() -> None:
    graph = {
        "walflow.records.events": {"walflow.capture.stream", "walflow.errors"},
        "walflow.capture.stream": {"walflow.records.events"},
    }
    assert later_imports(graph) == ["walflow.records.events (records) -> walflow.capture.stream (capture)"]
    assert stage_of("walflow.kafka") == 4 and stage_of("walflow.stray") is None and stage_of("walflow") == 0


def test_no_two_modules_import_each_other() -> None:
    graph = import_graph()
    assert "walflow.capture.snapshot" in graph and "walflow.lake.apply" in graph, sorted(graph)[:10]
    found = cycles(graph)
    assert not found, "modules that import each other (directly or through others): " + "; ".join(
        " <-> ".join(c) for c in found
    )


def test_a_cycle_is_found_where_there_is_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def _documented_modules() -> set[str]:
    """The modules ``docs/layout.md``'s stage table names, as paths under ``plugins/walflow`` (a row whose stage
    cell is empty belongs to the stage above it)."""
    folders = {"base": "", "kafka": ""}
    found: set[str] = set()
    folder = None
    text = (PLUGINS.parent / "docs" / "layout.md").read_text()
    section = text.split("## The package, stage by stage", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("stage", "---"):
            continue
        if cells[0]:
            folder = folders.get(cells[0], cells[0].strip("`"))
        for name in re.findall(r"`([a-z_]+\.py)`", cells[1] + " " + cells[2]):
            found.add(folder + name)
    return found


def test_the_docs_map_every_module() -> None:
    modules = {
        str(path.relative_to(PLUGINS / "walflow"))
        for path in (PLUGINS / "walflow").rglob("*.py")
        if path.name != "__init__.py"
    }
    documented = _documented_modules()
    assert modules - documented == set(), f"modules docs/layout.md does not describe: {sorted(modules - documented)}"
    assert documented - modules == set(), (
        f"docs/layout.md describes modules that do not exist: {sorted(documented - modules)}"
    )


def test_the_readme_maps_every_stage() -> None:
    readme = (PLUGINS.parent / "README.md").read_text()
    tree = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    packages = sorted(path.parent.name for path in (PLUGINS / "walflow").glob("*/__init__.py"))
    missing = [name for name in packages if f"  {name}/ " not in tree]
    assert not missing, f"the README's layout map lacks the subpackages {missing}"
    for _name, roots in STAGES:
        for root in roots:
            if root.count(".") == 1 and (PLUGINS / (root.replace(".", "/") + ".py")).exists():
                assert f"{root.split('.')[1]}.py" in tree, f"the README's layout map lacks {root}"


#: the capture stage's own order, earliest first: what every capture task shares, then the snapshots, then the stream
#: sub-package from its records up to the batch. A capture module imports from its own layer and earlier ones only
CAPTURE_LAYERS = (
    (
        "shared",
        (
            "walflow.capture.failures",
            "walflow.capture.context",
            "walflow.capture.batches",
            "walflow.capture.metrics",
            "walflow.capture.prefetch",
            "walflow.capture.drift",
            "walflow.capture.emitter",
            "walflow.capture.kafka_signals",
            "walflow.capture.notifications",
            "walflow.capture.reselect",
            "walflow.capture.rereads",
            "walflow.capture.schema_facts",
            "walflow.capture.snapshot_tables",
        ),
    ),
    (
        "snapshots",
        (
            "walflow.capture.snapshot_workers",
            "walflow.capture.snapshot",
            "walflow.capture.snapshot_mode",
            "walflow.capture.incremental.conditions",
            "walflow.capture.incremental.progress",
            "walflow.capture.incremental.marks",
            "walflow.capture.incremental.chunks",
            "walflow.capture.incremental.state",
            "walflow.capture.incremental.queue",
            "walflow.capture.incremental.signals",
            "walflow.capture.incremental.selection",
            "walflow.capture.incremental.windows",
            "walflow.capture.incremental.snapshots",
            "walflow.capture.incremental",
            "walflow.capture.setup",
        ),
    ),
    (
        "stream parts",
        (
            "walflow.capture.stream.resume",
            "walflow.capture.stream.transactions",
            "walflow.capture.stream.changes",
            "walflow.capture.stream.checks",
            "walflow.capture.stream.relations",
            "walflow.capture.stream.snapshots",
        ),
    ),
    ("stream dispatch", ("walflow.capture.stream.dispatch",)),
    ("stream read", ("walflow.capture.stream.peek",)),
    ("stream rounds", ("walflow.capture.stream.rounds",)),
    ("stream batch", ("walflow.capture.stream.batch", "walflow.capture.stream")),
)


def layer_of(module: str) -> int | None:
    for index, (_name, modules) in enumerate(CAPTURE_LAYERS):
        if module in modules:
            return index
    return None


def test_every_capture_module_has_a_layer() -> None:
    homeless = sorted(m for m in import_graph() if m.startswith("walflow.capture.") and layer_of(m) is None)
    assert not homeless, f"capture modules outside every layer of CAPTURE_LAYERS: {homeless}"


def test_no_capture_module_imports_from_a_later_layer() -> None:
    found = []
    for module, imported in sorted(import_graph().items()):
        mine = layer_of(module)
        for other in sorted(imported):
            theirs = layer_of(other)
            if mine is not None and theirs is not None and theirs > mine:
                found.append(f"{module} ({CAPTURE_LAYERS[mine][0]}) -> {other} ({CAPTURE_LAYERS[theirs][0]})")
    assert not found, "capture imports against its layers: " + "; ".join(found)
