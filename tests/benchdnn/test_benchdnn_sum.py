"""python -m pydnnl.benchdnn --sum: correctness mode (scales, input counts, layouts), a
performance line, bad options."""
from __future__ import annotations

import pathlib
import re
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_cli import main  # noqa: E402


def test_correctness_mode(capsys):
    rc = main(["--sum", "--mode=C", "--scales=0.5:2", "8x16x5x5:8x16x5x5",
               "--scales=0.5", "--sdt=f32:f32:f32", "--stag=abx:axb:aBx16b", "2x20x3x3",
               "--reset", "--sum", "--mode=C", "--dtag=axb", "4x4x4"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("check,passed") == 3 and "FAILED" not in out, out
    assert "2x20x3x3:2x20x3x3:2x20x3x3" in out


def test_performance_line(capsys):
    rc = main(["--sum", "--mode=P", "--min-seconds=0", "--scales=0.5:2",
               "8x16x32x32:8x16x32x32"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = [ln for ln in out.splitlines() if ln.startswith("perf,sum")]
    assert len(lines) == 1 and re.search(r"of_copy=[0-9.]+", lines[0]), out


@pytest.mark.parametrize("argv, match", [
    (["--sum", "--scales=1:2:3", "2x2:2x2"], "disagree"),
    (["--sum", "2x2:2x3"], "same dims"),
    (["--sum", "--axis=1", "2x2"], "unknown option"),
])
def test_bad_options(argv, match):
    with pytest.raises(SystemExit, match=match):
        main(argv)
