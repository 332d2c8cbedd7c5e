"""The import layers point one way, so that each layer can be read, tested and changed without the
ones above it: jobs use actors and coordination, actors use coordination, never the other way; the
pure modules (the logic tested without Ray or ZooKeeper) load neither `ray` nor `kazoo`, not even
through another module of the repository; and no modules import each other in a cycle. Read from
the sources with `ast`: imports inside functions count, those under `if TYPE_CHECKING:` never run
(they count only for the direction of the layers)."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("actors", "coordination", "jobs")
PURE = [
    "actors.protocol", "actors.records", "actors.columns", "actors.names", "actors.links.faults", "actors.links.shapes",
    *(f"actors.controller.{m}" for m in (
        "context", "state_machines", "election", "changes", "decisions", "timeline", "events", "request_batch")),
    *(f"actors.broker.{m}" for m in ("replication", "fetch_session", "errors", "controller_requests",
                                     "delayed_operations", "request_metrics")),
    *(f"actors.broker.log.{m}" for m in ("batches", "producer_state", "leader_epochs", "checkpoints", "log_config")),
    *(f"actors.broker.network.{m}" for m in ("api_versions", "wire")),
    *(f"actors.broker.group.{m}" for m in ("group_records", "group_metadata", "group_metadata_manager",
                                           "group_coordinator")),
    *(f"coordination.{m}" for m in ("zkdata", "errors", "topic_config")),
    "jobs.measures.failovers", "jobs.reports.timeline_page", "jobs.experiments.disk_faults",
    "jobs.measures.group_failovers", "jobs.experiments.summary", "jobs.measures.statistics",
    "jobs.measures.knee", "jobs.hosts.layout",
]
RUNTIMES = ("ray", "kazoo")


class Import(NamedTuple):
    module: str  # the module importing
    target: str  # the module imported: a module of the repository when it is one, else its top-level package
    line: int
    top_level: bool  # runs when the module is imported (not inside a function)
    type_only: bool  # under `if TYPE_CHECKING:`: never runs

    def __str__(self) -> str:
        return f"{self.module} (line {self.line}) imports {self.target}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def _resolve(name: str) -> str:
    """The repository module `name` loads (its longest prefix that is one), else its top-level package."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in MODULES:
            return ".".join(parts[:n])
    return parts[0]


def _imported(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [_resolve(a.name) for a in node.names]
    base = node.module or ""
    if node.level:  # relative: from the importing module's package, and up
        package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    return [_resolve(f"{base}.{a.name}") for a in node.names]  # `from package import module` loads the module


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or \
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _imports(module: str, nodes: list[ast.stmt], top_level: bool = True, type_only: bool = False) -> list[Import]:
    out = []
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out += [Import(module, target, node.lineno, top_level, type_only)
                    for target in _imported(module, node) if target != module]
        elif isinstance(node, ast.If) and _is_type_checking(node):
            out += _imports(module, node.body, top_level, True) + _imports(module, node.orelse, top_level, type_only)
        else:
            inside_function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            children = [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)]
            out += _imports(module, children, top_level and not inside_function, type_only)
    return out


IMPORTS = {m: _imports(m, ast.parse(p.read_text(), str(p)).body) for m, p in MODULES.items()}


def _layer(module: str) -> str:
    return module.split(".")[0]


def _runs(module: str) -> list[Import]:
    return [i for i in IMPORTS[module] if not i.type_only]


def test_the_modules_named_here_exist():
    assert {"actors.controller.controller", "coordination.zkclient", "jobs.measures.rundir"} <= set(IMPORTS)
    assert not [m for m in PURE if m not in MODULES], "a pure module named here no longer exists"


def test_actors_and_coordination_do_not_import_jobs():
    wrong = [str(i) for m, imports in IMPORTS.items() if _layer(m) in ("actors", "coordination")
             for i in imports if _layer(i.target) == "jobs"]
    assert not wrong, "jobs build on actors and coordination, not the other way: " + "; ".join(wrong)


def test_coordination_does_not_import_actors():
    wrong = [str(i) for m, imports in IMPORTS.items() if _layer(m) == "coordination"
             for i in imports if _layer(i.target) == "actors"]
    assert not wrong, "coordination is ZooKeeper's layer, below the actors: " + "; ".join(wrong)


def _runtime_chain(module: str, seen: set[str]) -> list[Import] | None:
    """The imports by which `module` loads ray or kazoo, directly or through modules of the repository."""
    for i in _runs(module):
        if i.target in RUNTIMES:
            return [i]
    for i in _runs(module):
        if i.target in MODULES and i.target not in seen:
            seen.add(i.target)
            if chain := _runtime_chain(i.target, seen):
                return [i, *chain]
    return None


def test_pure_modules_load_neither_ray_nor_kazoo():
    wrong = [", which imports ".join([str(chain[0]), *(f"{i.target} (line {i.line})" for i in chain[1:])])
             for m in PURE if m in MODULES and (chain := _runtime_chain(m, {m}))]
    assert not wrong, "pure modules run without Ray or ZooKeeper: " + "; ".join(wrong)


def _cycles(edges: dict[str, list[Import]]) -> list[list[Import]]:
    """A cycle through each group of modules that reach one another (Tarjan's strongly connected
    components), as its imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        for i in edges[m]:
            if i.target not in index:
                visit(i.target)
                low[m] = min(low[m], low[i.target])
            elif i.target in stack:
                low[m] = min(low[m], index[i.target])
        if low[m] == index[m]:
            group = set(stack[stack.index(m):])
            del stack[stack.index(m):]
            if len(group) > 1:
                groups.append(group)

    for m in sorted(edges):
        if m not in index:
            visit(m)
    cycles = []
    for group in groups:
        path, m, visited = [], min(group), {}  # walk inside the group until a module repeats: that loop is a cycle
        while m not in visited:
            visited[m] = len(path)
            path.append(next(i for i in edges[m] if i.target in group))
            m = path[-1].target
        cycles.append(path[visited[m]:])
    return cycles


def _graph(top_level_only: bool) -> dict[str, list[Import]]:
    return {m: [i for i in _runs(m) if i.target in MODULES and (i.top_level or not top_level_only)]
            for m in IMPORTS}


def test_no_import_cycles_at_module_level():
    cycles = _cycles(_graph(top_level_only=True))
    assert not cycles, "import cycles: " + " | ".join("; ".join(map(str, c)) for c in cycles)


def test_no_import_cycles_through_imports_inside_functions_either():
    """An import moved into a function to dodge a cycle still ties the two modules together."""
    cycles = _cycles(_graph(top_level_only=False))
    assert not cycles, "import cycles: " + " | ".join("; ".join(map(str, c)) for c in cycles)


def test_no_import_cycles_even_through_imports_for_type_checking():
    """A cycle only the type checker follows still ties two modules together: a reader of one must read
    the other (the deletion manager once typed itself against FlowScope, which builds it; it now names
    the narrow DeletionClient it needs, as Kafka's does)."""
    graph = {m: [i for i in IMPORTS[m] if i.target in MODULES] for m in IMPORTS}
    cycles = _cycles(graph)
    assert not cycles, "import cycles: " + " | ".join("; ".join(map(str, c)) for c in cycles)


BROKER = "actors.broker"
LOG, GROUP, NETWORK = f"{BROKER}.log", f"{BROKER}.group", f"{BROKER}.network"
ERRORS = f"{BROKER}.errors"  # the data plane's exceptions: a leaf every part of the broker may raise


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _broker_imports(package: str) -> list[Import]:
    """What the modules under `package` import of the rest of the broker (type-only imports too)."""
    return [i for m, imports in IMPORTS.items() if _in(m, package) for i in imports
            if _in(i.target, BROKER) and not _in(i.target, package) and i.target != ERRORS]


def test_the_broker_is_laid_out_as_kafka_lays_its_packages():
    assert {LOG, GROUP, NETWORK} <= set(MODULES)
    assert f"{LOG}.log" in MODULES and f"{GROUP}.group_coordinator" in MODULES and f"{NETWORK}.kafka_apis" in MODULES


def test_log_storage_imports_nothing_above_it():
    """kafka.log knows no partition, replica manager, request or group: the replica server, the wire and
    the group coordinator build on it."""
    wrong = [str(i) for i in _broker_imports(LOG)]
    assert not wrong, "log storage imports the layers above it: " + "; ".join(wrong)


def test_the_group_coordinator_reaches_the_replica_server_only_through_its_own_interface():
    """As the controller's flows reach the controller through FlowScope: the coordinator is handed what
    it needs of the replica server (its log and its events) and imports none of it; it builds on log
    storage (record batches) alone."""
    wrong = [str(i) for i in _broker_imports(GROUP) if not _in(i.target, LOG)]
    assert not wrong, "the group coordinator imports the replica server or the wire: " + "; ".join(wrong)


def test_the_replica_server_does_not_import_the_wire():
    """The replica manager, partitions, ISR and fetch sessions are served by the wire, not the other way.
    Two modules of the replica server speak the protocol: the fetcher (a client of the leaders'
    listeners, as Kafka's ReplicaFetcherThread) and the actor, the shell that starts the listeners."""
    speakers = {f"{BROKER}.fetcher", f"{BROKER}.actor"}
    wrong = [str(i) for m, imports in IMPORTS.items()
             if _in(m, BROKER) and not any(_in(m, p) for p in (LOG, GROUP, NETWORK)) and m not in speakers
             for i in imports if _in(i.target, NETWORK)]
    assert not wrong, "the replica server imports the wire: " + "; ".join(wrong)


LONGEST = 600  # lines


def test_no_file_is_over_600_lines_unless_it_says_why_at_its_top():
    """Kafka's 2,900-line KafkaController is what kray's layout avoids: a file that grows past this splits
    where its concepts split, or its docstring says why it stays whole ("Over 600 lines ...")."""
    files = [p for d in (*PACKAGES, "benchmarks", "tests") for p in (ROOT / d).rglob("*.py")]
    long = [f"{p.relative_to(ROOT)} ({n} lines)" for p in files
            if (n := len(p.read_text().splitlines())) > LONGEST
            and "Over 600 lines" not in (ast.get_docstring(ast.parse(p.read_text())) or "")]
    assert not long, "over 600 lines without a reason at the top: " + ", ".join(long)
