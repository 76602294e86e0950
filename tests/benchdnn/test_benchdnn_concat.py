"""python -m pydnnl.benchdnn --concat: correctness mode (axes, layouts), a performance line,
bad options."""
from __future__ import annotations

import pathlib
import re
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_cli import main  # noqa: E402


def test_correctness_mode(capsys):
    rc = main(["--concat", "--mode=C", "--axis=1", "8x16x3x3:8x8x3x3", "--axis=2",
               "--stag=axb:abx:abx", "--dtag=aBx8b", "2x12x3x5:2x12x7x5:2x12x1x5",
               "--axis=0,3", "--stag=abx", "2x3x4x5:2x3x4x5"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("check,passed") == 4 and "FAILED" not in out, out


def test_performance_line(capsys):
    rc = main(["--concat", "--mode=P", "--min-seconds=0", "--axis=1",
               "8x16x32x32:8x8x32x32"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = [ln for ln in out.splitlines() if ln.startswith("perf,concat")]
    assert len(lines) == 1 and re.search(r"of_copy=[0-9.]+", lines[0]), out


@pytest.mark.parametrize("argv, match", [
    (["--concat", "--axis=x", "2x2:2x2"], "--axis=x"),
    (["--concat", "--axis=0", "2x2:2x3"], "dimension 1"),
    (["--concat", "--scales=1", "2x2:2x2"], "unknown option"),
])
def test_bad_options(argv, match):
    with pytest.raises(SystemExit, match=match):
        main(argv)
