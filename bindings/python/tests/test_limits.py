"""The Python package's copies of the shared limits and names (crates/toolonce/data/limits.json,
the one source the Rust core and the TypeScript package also hold to): the `_meta` names the
framework adapters write and the defaults of a write tool's lease and retention, read from the
sources so that no framework needs to be installed."""

import ast
import json
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "toolonce"
LIMITS = json.loads((Path(__file__).resolve().parents[3] / "crates/toolonce/data/limits.json").read_text())


def assignments(path: Path) -> dict:
    """The module's top-level `NAME = "text"` assignments."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def defaults(name: str):
    """Every default of a parameter or field `name` in the package, with where it is."""
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                if isinstance(node.value, ast.Constant):
                    yield f"{path.name}:{node.lineno}", node.value.value
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.kwonlyargs
                for arg, default in zip(args, node.args.kw_defaults):
                    if arg.arg == name and isinstance(default, ast.Constant):
                        yield f"{path.name}:{node.lineno}", default.value


def test_the_meta_names_the_adapters_write_are_the_shared_ones():
    names = assignments(PACKAGE / "_framework.py")
    assert names["OUTCOME_KEY"] == LIMITS["meta"]["outcome"]
    assert names["KEY_KEY"] == LIMITS["meta"]["key"]


def test_every_default_lease_and_retention_in_seconds_is_the_shared_one():
    for name, shared in (("lease", LIMITS["lease_ms"]["default"]), ("retention", LIMITS["retention_ms"]["default"])):
        found = list(defaults(name))
        assert found, f"no default {name} found in the package"
        for where, seconds in found:
            assert seconds * 1000 == shared, f"{where}: {name} defaults to {seconds} s, the shared default is {shared} ms"
