"""Every Python example of README.md and docs/python.md runs as written (from the
repository's root, where they find `data/`)."""

import os
import pathlib
import re

import pytest

REPO = pathlib.Path(os.environ.get("NMSPARSE_REPO", pathlib.Path(__file__).resolve().parents[2]))
DOCS = [REPO / "README.md", REPO / "docs" / "python.md"]


def examples():
    for doc in DOCS:
        text = doc.read_text()
        for n, block in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
            yield pytest.param(block, id=f"{doc.name}-{n}")


@pytest.mark.parametrize("code", list(examples()))
def test_example_runs(code, monkeypatch, request):
    monkeypatch.chdir(REPO)
    exec(compile(code, f"<{request.node.callspec.id}>", "exec"), {"__name__": "__example__"})


def test_every_document_has_examples():
    for doc in DOCS:
        assert "```python" in doc.read_text(), f"{doc.name} has no Python example"
