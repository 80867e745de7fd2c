"""The layers docs/layout.md draws, checked on the code: analyses write no sentences (they return numbers
and reason codes; reports/ words them), the pipeline does not reach up into the reports, and the
analyses do not reach back into alignment or the readers."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "distprof"
WORDS = re.compile(r"[A-Za-z]{2,}")


def _sentences(path: Path) -> list[tuple[int, str]]:
    """String literals (f-string parts too) of three or more words, outside docstrings and the
    messages of raised errors."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise):
            skipped |= {id(sub) for sub in ast.walk(node)}
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skipped.add(id(node.value))  # docstrings and bare string statements
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped
            and " " in node.value and len(WORDS.findall(node.value)) >= 3]


def test_the_scan_finds_a_sentence(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""A docstring is fine."""\nNOTE = "the late rank rotates"\n'
                      'def f(x):\n    raise ValueError(f"{x} is not a number at all")\n')
    assert _sentences(module) == [(2, "the late rank rotates")]


@pytest.mark.parametrize("path", sorted((PACKAGE / "analyses").glob("*.py")), ids=lambda p: p.name)
def test_analyses_write_no_sentences(path: Path) -> None:
    assert _sentences(path) == []


def _imports(path: Path, tree: ast.Module | None = None) -> set[str]:
    """The distprof modules a module (``tree``: its parsed code, else the file's) imports (relative imports
    resolved), as dotted names."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(tree or ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            out |= {module} | {f"{module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
    return {name for name in out if name.startswith("distprof")}


def test_no_arrow_from_the_pipeline_to_the_reports() -> None:
    assert not [name for name in _imports(PACKAGE / "pipeline.py") if name.startswith("distprof.reports")]


@pytest.mark.parametrize("path", sorted((PACKAGE / "analyses").glob("*.py")), ids=lambda p: p.name)
def test_no_arrow_from_the_analyses_to_alignment_or_the_readers(path: Path) -> None:
    assert not [name for name in _imports(path) if name.startswith(("distprof.align", "distprof.sources"))]


def _runtime_imports(path: Path) -> set[str]:
    """The distprof modules a module imports when it runs: not those under ``if TYPE_CHECKING:``, which
    only name types for the checker."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            node.body = [ast.Pass()]
    return _imports(path, tree)


@pytest.mark.parametrize("path", sorted((PACKAGE / "sources").glob("*.py")), ids=lambda p: p.name)
def test_no_arrow_from_the_readers_to_the_analyses(path: Path) -> None:
    """A reader turns files into events; which op args a FLOP formula needs lives in distprof.flop_ops."""
    assert not [name for name in _imports(path) if name.startswith("distprof.analyses")]


@pytest.mark.parametrize("path", sorted((PACKAGE / "reports").glob("*.py")), ids=lambda p: p.name)
def test_no_arrow_from_the_reports_to_the_analyses_or_the_readers(path: Path) -> None:
    """Reports phrase typed records (distprof.sections, results): they compute nothing and read no input
    file's format. Type names for the checker only are allowed (hang's result is not a section yet)."""
    assert not [name for name in _runtime_imports(path) if name.startswith(("distprof.analyses", "distprof.sources"))]


def _reasons(paths) -> list[tuple[str, tuple[str, ...] | None]]:
    """(code, figure names) of every ``Reason("code", {...})`` written in these modules; the names are None
    where the figures are not a literal dict (built elsewhere: the analysis's own tests cover those)."""
    out = []
    for node in (node for path in paths for node in ast.walk(ast.parse(path.read_text()))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Reason" and node.args \
                and isinstance(node.args[0], ast.Constant):
            figures = node.args[1] if len(node.args) > 1 else ast.Dict(keys=[], values=[])
            literal = isinstance(figures, ast.Dict) and all(isinstance(k, ast.Constant) for k in figures.keys)
            out.append((node.args[0].value, tuple(k.value for k in figures.keys) if literal else None))
    return out


def test_every_reason_code_has_words_that_take_its_figures() -> None:
    """An analysis gives a code and its figures, a report words it: a code without words would end the report
    in a KeyError, a figure its words do not name (or one they need and do not get) in a TypeError. Each word
    function takes the figures as keyword arguments, so its signature is the code's list of figures. The hang
    analysis's codes are worded by its own report."""
    import inspect

    from distprof.reports import findings, hang_report
    hang = PACKAGE / "analyses" / "hang.py"
    for paths, words in (([p for p in PACKAGE.rglob("*.py") if p != hang], findings.TEXTS),
                         ([hang], hang_report.WORDS)):
        reasons = _reasons(paths)
        assert len({code for code, _ in reasons}) > 10  # the scan finds them
        assert {code for code, _ in reasons} - set(words) == set()
        for code, names in reasons:
            if names is not None:
                inspect.signature(words[code]).bind(**dict.fromkeys(names))  # raises: the words do not fit


def test_pointers_in_the_code_lead_somewhere() -> None:
    """Every docs page the code and the tests cite (as docs/summary.md) exists in the repository, and nothing cites a
    document outside it (DESIGN.md) or a module that is gone (reports/words.py, sources/joins.py)."""
    texts = {path: path.read_text() for folder in (PACKAGE, PACKAGE.parent / "tests") for path in folder.rglob("*.py")}
    cited = {name for text in texts.values() for name in re.findall(r"docs/([\w-]+\.md)", text)}
    assert cited and not [name for name in cited if not (PACKAGE.parent / "docs" / name).exists()]
    stale = re.compile(r"DESIGN\b|reports/words\.py|sources[./]joins")
    assert not [path.name for path, text in texts.items() if stale.search(text) and path.name != "test_layers.py"]


# a mapping keyed by rank or by name whose values are typed (a number, a text or a record class): the same kind
# of value as the sections' own ``*_by_rank: dict[int, int]`` fields, not a record posing as a dict
TYPED_MAPPING = re.compile(r"dict\[(int|str), (int|str|float|[A-Z]\w*)\]")


def _returns_a_record_as_a_dict() -> dict[str, str]:
    """module.function -> return annotation, of every public function in analyses/ whose return annotation
    holds a dict that is not a typed mapping (a bare ``dict``, ``dict[str, Any]``, columns as
    ``dict[str, np.ndarray]``, a list of dicts)."""
    return {f"{path.stem}.{node.name}": ast.unparse(node.returns)
            for path in sorted((PACKAGE / "analyses").glob("*.py")) for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and node.returns is not None
            and "dict" in TYPED_MAPPING.sub("", ast.unparse(node.returns))}


def test_no_public_analysis_returns_a_record_as_a_dict() -> None:
    """Analyses return typed records (sections/, or their own records of arrays), never dicts keyed by field
    names: the allow-list of issue 56 ended empty. Typed mappings keyed by rank or name stay."""
    assert _returns_a_record_as_a_dict() == {}
    assert TYPED_MAPPING.fullmatch("dict[int, int]") and TYPED_MAPPING.fullmatch("dict[str, GroupMembers]")
    assert "dict" in TYPED_MAPPING.sub("", "dict[str, np.ndarray]")  # columns as a dict: flagged
