"""The Python a document marks to be run: a ```python fence right after the HTML comment
`<!-- python run -->` in README.md or docs/*.md runs as a script of its own (in a fresh
interpreter, from a temporary directory), and the ```text output fence after it, if any, is
what it must print - matched line by line as the C++ fragments' are: trailing spaces
ignored, `...` in a line matching any text and a line of just `...` any lines."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
BLOCK = re.compile(r"<!-- python run -->\n```python\n(.*?)```\n(?:```text output\n(.*?)```\n)?", re.S)


def blocks():
    for doc in DOCS:
        text = doc.read_text()
        for m in BLOCK.finditer(text):
            line = text[:m.start()].count("\n") + 2
            yield pytest.param(m.group(1), m.group(2), id=f"{doc.relative_to(ROOT)}:{line}")


def line_matches(pattern, line):
    parts = [re.escape(p) for p in pattern.rstrip().split("...")]
    return re.fullmatch(".*".join(parts), line.rstrip()) is not None


def output_matches(expected, got):
    """Line-by-line with the `...` rules; a line of just `...` takes any lines."""
    if not expected:
        return not got
    if expected[0].strip() == "...":
        return any(output_matches(expected[1:], got[i:]) for i in range(len(got) + 1))
    return bool(got) and line_matches(expected[0], got[0]) and output_matches(expected[1:], got[1:])


def test_the_documents_mark_some_python():
    assert any(True for _ in blocks()), "no <!-- python run --> fence found"


@pytest.mark.parametrize("code,output", list(blocks()))
def test_document_python_runs(code, output, tmp_path, run_python):
    r = run_python(code, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    if output is not None:
        assert output_matches(output.splitlines(), r.stdout.splitlines()), r.stdout
