"""Each test module stands alone: what tests share lives in tests/support/ (or helpers, harness,
fakes, tests/core/builders), never in another test module. Importing one test module from another
runs its module-level code twice under two names and registers its fixtures in both."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_test_modules(path: Path) -> list[str]:
    """The test modules ``path`` imports, anywhere in it (a function's own import too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.rsplit(".", 1)[-1].startswith("test_")]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.rsplit(".", 1)[-1].startswith("test_"):
                found.append(node.module)
            else:  # from tests import test_x
                found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("test_")]
    return found


def test_no_test_module_imports_another():
    offenders = {str(p.relative_to(TESTS)): found for p in sorted(TESTS.rglob("test_*.py"))
                 if (found := imported_test_modules(p))}
    assert offenders == {}, f"move what they share into tests/support/: {offenders}"


def test_the_check_sees_every_form(tmp_path):
    """The checker itself: each way of importing a test module is seen, a support import is not."""
    f = tmp_path / "test_x.py"
    f.write_text("import test_a\nfrom test_b import c\nfrom tests.test_d import e\nfrom tests import test_f\n"
                 "from support.clients import Client\nimport helpers\n"
                 "def g():\n    from test_h import i\n")
    assert imported_test_modules(f) == ["test_a", "test_b", "tests.test_d", "tests.test_f", "test_h"]
