"""The texts a model reads come from the core's data/texts.json, read through the binding: the
package's Python code uses only texts the file has, fills each one's placeholders, and holds no
copy of one (six words in a row of a template, in any string of its own)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from toolonce import _native

PACKAGE = Path(_native.__file__).parent
SOURCES = sorted(PACKAGE.glob("*.py"))
RUN = 6


def placeholders(template: str) -> set:
    return set(re.findall(r"\{([a-z_]+)\}", template))


def uses() -> list:
    """Each ``text("name", {...})`` call of the package: the name and the values' keys."""
    found = []
    for source in SOURCES:
        for node in ast.walk(ast.parse(source.read_text())):
            if not (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "text"):
                continue
            name, values = node.args
            keys = {k.value for k in values.keys} if isinstance(values, ast.Dict) else None
            found.append((source.name, name.value, keys))
    return found


def test_the_package_uses_texts_the_file_has_and_fills_every_placeholder():
    templates = _native.templates()
    found = uses()
    assert any(name == "command_unstorable" for _, name, _ in found), found
    for source, name, keys in found:
        assert name in templates, f"{source} uses a text {name} that data/texts.json lacks"
        assert keys == placeholders(templates[name]), (source, name)


def test_a_text_is_filled_once_and_a_wrong_name_or_value_is_refused():
    filled = _native.text("conflict", {"tool": "pay", "key": "idem:{key}"})
    assert filled.startswith("Conflict: an earlier call of `pay` "), filled
    assert "(operation idem:{key})" in filled
    with pytest.raises(ValueError, match="no text is named"):
        _native.text("no_such_text", {})
    with pytest.raises(ValueError, match="takes the values"):
        _native.text("conflict", {"tool": "pay"})
    with pytest.raises(ValueError, match="takes the values"):
        _native.text("conflict", {"tool": "pay", "key": "k", "stray": "x"})


def runs(text: str) -> set:
    """Every six words in a row of ``text``, broken at placeholders."""
    out = set()
    for part in re.split(r"\{[a-z_]*\}", text):
        words = re.findall(r"[a-z0-9']+", part.lower())
        out.update(" ".join(words[i : i + RUN]) for i in range(len(words) - RUN + 1))
    return out


def strings(tree: ast.AST):
    """The package's own strings: constants and f-strings' literal parts, docstrings left out."""
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            yield node.lineno, "".join(
                v.value if isinstance(v, ast.Constant) else "{x}" for v in node.values
            )
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                yield node.lineno, node.value


def test_the_package_holds_no_copy_of_a_text():
    copied = set().union(*(runs(t) for t in _native.templates().values()))
    found = []
    for source in SOURCES:
        for line, text in strings(ast.parse(source.read_text())):
            hit = runs(text) & copied
            if hit:
                found.append(f"{source.name}:{line}: {sorted(hit)[0]!r}: {text}")
    assert found == []
