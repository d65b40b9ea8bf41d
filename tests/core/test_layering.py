"""The shape of the tree is the architecture: the core imports nothing else of lamina."""

import ast
from pathlib import Path

import lamina

PACKAGE = Path(lamina.__file__).parent
OUTSIDE_CORE = ("lamina.plugins", "lamina.frontends", "lamina.backends", "lamina.contrib",
                "lamina.testing", "lamina.cli", "lamina.api", "lamina.bench")


def imported_modules(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.lineno, node.module


def test_core_imports_nothing_outside_the_core():
    offenders = []
    for path in sorted((PACKAGE / "core").rglob("*.py")):
        for line, module in imported_modules(path):
            if module == "lamina" or module.startswith(OUTSIDE_CORE):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}")
    assert offenders == []


def test_builtin_plugins_are_named_not_imported_by_the_core():
    from lamina.core.plugins import BUILTIN_PLUGINS

    for module in BUILTIN_PLUGINS.values():
        assert module.startswith(("lamina.plugins.", "lamina.backends."))
