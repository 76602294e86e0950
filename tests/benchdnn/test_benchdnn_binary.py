"""python -m pydnnl.benchdnn --binary: correctness mode over algorithms, broadcasts, layouts,
scales and post-ops; a performance line; bad options."""
from __future__ import annotations

import pathlib
import re
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_cli import main  # noqa: E402


def test_correctness_mode(capsys):
    rc = main(["--binary", "--mode=C", "--alg=ADD,MUL,MAX,MIN,DIV,SUB,GE,GT,LE,LT,EQ,NE",
               "8x16x5x5:8x16x1x1", "--alg=SUB", "--stag=axb:abx", "--inplace=false",
               "--attr-scales=src0:common:0.5+src1:common:2",
               "--attr-post-ops=sum:0.5+relu+mul:f32:per_oc", "2x16x3x3:1x16x1x3",
               "--reset", "--binary", "--mode=C", "--stag=aBx16b", "2x20x3x3:2x1x3x3",
               "8x8x3x5:8", "1x8x1x5:2x8x3x5"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("check,passed") == 16 and "FAILED" not in out, out


def test_performance_line(capsys):
    rc = main(["--binary", "--mode=P", "--min-seconds=0", "--compare=torch",
               "--alg=ADD", "8x16x32x32:8x16x1x1"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = [ln for ln in out.splitlines() if ln.startswith("perf,binary")]
    assert len(lines) == 1, out
    assert re.search(r"gbs=[0-9.]+,copy_gbs=[0-9.]+,of_copy=[0-9.]+", lines[0]), lines[0]
    assert re.search(r"torch(_ms=[0-9.]+|=n/a)", lines[0]), lines[0]


@pytest.mark.parametrize("argv, match", [
    (["--binary", "--alg=POW", "2x2:2x2"], "--alg=POW"),
    (["--binary", "2x2"], "SRC0DIMS:SRC1DIMS"),
    (["--binary", "--stag=abx:abx:abx", "2x2:2x2"], "--stag"),
    (["--binary", "--nope=1", "2x2:2x2"], "unknown option"),
    (["--binary", "--sdt=s8:s8", "2x2:2x2"], "--sdt=s8:s8"),
])
def test_bad_options(argv, match):
    with pytest.raises(SystemExit, match=match):
        main(argv)
