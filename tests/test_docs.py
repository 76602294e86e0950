"""The README, the docs and the examples are true: their code runs and checks its results."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


BLOCKS = [(p, i, code) for p in DOCS for i, code in enumerate(_python_blocks(p))]


@pytest.mark.parametrize("path,index,code", BLOCKS,
                         ids=[f"{p.relative_to(ROOT)}#{i}" for p, i, _ in BLOCKS])
def test_doc_snippet_runs(path, index, code):
    if re.search(r"^\s*(import torch|from pydnnl.torch|from torch)", code, re.M):
        pytest.importorskip("torch", reason="the snippet uses PyTorch, an optional extra")
    exec(compile(code, f"{path.name}#{index}", "exec"), {"__name__": "__doc_snippet__"})


@pytest.mark.parametrize("script,args", [("examples/quickstart.py", []),
                                         ("examples/lstm_inference.py", ["8", "4", "32"]),
                                         ("examples/train_digits_lstm.py", [])])
def test_example_runs(script, args):
    r = subprocess.run([sys.executable, str(ROOT / script), *args], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip(), "the example printed nothing"


def test_readme_commands_are_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    test_cmd = 'pip install ".[test]" && python -m pytest -q'
    assert test_cmd in readme
    assert test_cmd in ci
    assert "pip install . && python examples/lstm_inference.py" in readme
