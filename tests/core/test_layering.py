"""The shape of the tree is the architecture: each package of lamina imports only the packages below it,
and the core's modules import one another without a cycle.

``ALLOWED`` is the architecture as a table (docs: DESIGN's layout). Every module's imports
are read from its source, those inside functions included, so a lazy import is a
dependency like any other.
"""

import ast
from pathlib import Path

import lamina

PACKAGE = Path(lamina.__file__).parent

ALLOWED = {
    # The IR classes, hook specs, registry, plugin manager, pipeline and configuration:
    # everything else builds on the core, so it builds on nothing.
    "core": set(),
    # Capture a program (torch.export, an FX graph) as Torch IR.
    "frontends": {"core"},
    # The built-in plugins register through the core's hooks, exactly as a third party's do.
    "plugins": {"core"},
    # Opt-in plugins follow the same rule as the built-in ones.
    "contrib": {"core"},
    # Running a compiled program: its memory plan and the runner that launches kernels in order.
    "runtime": {"core"},
    # Both backends run a program through the runtime's runner; they differ in how one kernel is launched.
    "backends": {"core", "runtime"},
    # lamina.compile captures with the frontend, compiles with the core's pipeline and reads the
    # runtime's memory plan; plugins and backends reach it through the registry, never by import.
    "api": {"core", "frontends", "runtime"},
    # torch.compile's backend: Dynamo's FX graphs through the frontend, compiled by the API's Compiler.
    "integrations": {"core", "frontends", "api"},
    # The conformance kit checks a plugin's decompositions and schedules on the reference
    # interpreter and simulator and compiles its kernels with NVRTC: it runs the backends directly.
    # Its program fuzzer compiles whole programs through lamina.compile.
    "testing": {"core", "api", "backends", "runtime"},
    # The shipped model configurations, built with transformers.
    "models": {"core"},
    # A program written as one PyTorch expression, shared by the command line and the bench.
    "program_spec": {"core"},
    # lamina bench times what lamina.compile makes of the suite's programs and of the models.
    "bench": {"core", "api", "models", "program_spec"},
    # The lamina command, on top of everything it offers (``lamina tune`` is the autotuner's); nothing imports it.
    "cli": {"core", "api", "bench", "contrib", "models", "program_spec"},
}
"""For each top-level package (or module) of lamina, the other ones it may import."""


def package_of(path: Path) -> str:
    """The row of a source file: ``lamina/__init__.py`` is the public API, ``__main__`` the command."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts == ("__init__",):
        return "api"
    if parts == ("__main__",):
        return "cli"
    return parts[0]


def imported_packages(path: Path):
    """``(line, module, package)`` for every import of lamina in ``path``, wherever it stands."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: lamina imports by absolute names"
            modules = [(node.module, alias.name) for alias in node.names]
        else:
            continue
        for module, name in modules:
            parts = module.split(".")
            if parts[0] != "lamina":
                continue
            if len(parts) > 1:
                yield node.lineno, module, parts[1]
            elif name is not None and is_part_of_lamina(name):
                yield node.lineno, f"lamina.{name}", name
            else:
                yield node.lineno, module, "api"  # ``import lamina``: the public API of lamina/__init__.py


def is_part_of_lamina(name: str) -> bool:
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").exists()


def sources():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_package_has_a_row():
    packages = {package_of(p) for p in sources()}
    assert packages - ALLOWED.keys() == set(), "add the new package to ALLOWED, with what it may import"


def test_every_import_follows_the_layering():
    offenders = []
    for path in sources():
        package = package_of(path)
        for line, module, imported in imported_packages(path):
            if imported != package and imported not in ALLOWED.get(package, set()):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({package}) imports {module} ({imported})")
    assert offenders == []


def test_the_layers_have_no_cycle():
    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt}))
                   for nxt in ALLOWED.get(start, ()))

    assert [package for package in ALLOWED if reaches(package, package, set())] == []


def test_nothing_imports_the_command_line():
    assert [package for package, allowed in ALLOWED.items() if "cli" in allowed] == []


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"))


def run_time_nodes(node: ast.AST):
    """Every node under ``node`` but those of ``if TYPE_CHECKING:`` blocks, which never run."""
    for child in ast.iter_child_nodes(node):
        if _type_checking_block(child):
            for other in child.orelse:
                yield other
                yield from run_time_nodes(other)
            continue
        yield child
        yield from run_time_nodes(child)


def core_module_imports() -> dict[str, set[str]]:
    """For each module of the core, the core's modules it imports when it runs (a package's own parts left
    out): an import only for type annotations makes no cycle."""
    modules = {module_name(p): p for p in sources() if package_of(p) == "core"}
    graph = {}
    for module, path in modules.items():
        imported = set()
        for node in run_time_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
            else:
                continue
            imported |= {name for name in names if name in modules}
        graph[module] = {other for other in imported - {module}
                         if not other.startswith(module + ".") and not module.startswith(other + ".")}
    return graph


def test_the_core_modules_import_one_another_without_a_cycle():
    graph = core_module_imports()
    cycles, finished = [], set()

    def visit(module: str, path: list[str]) -> None:
        for other in sorted(graph[module]):
            if other in path:
                cycles.append(" -> ".join(path[path.index(other):] + [other]))
            elif other not in finished:
                visit(other, path + [other])
        finished.add(module)

    for module in sorted(graph):
        if module not in finished:
            visit(module, [module])
    assert cycles == []


def test_builtin_plugins_are_named_not_imported_by_the_core():
    from lamina.core.plugins import BUILTIN_PLUGINS

    for module in BUILTIN_PLUGINS.values():
        assert module.startswith(("lamina.plugins.", "lamina.backends."))
