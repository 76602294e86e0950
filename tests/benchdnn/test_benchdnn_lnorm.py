"""benchdnn --lnorm: correctness mode over directions, flags and layouts, and one timing run."""
from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_cli import main  # noqa: E402


def test_correctness_mode(capsys):
    rc = main(["--lnorm", "--mode=C", "--dir=FWD_D", "--flags=SC", "8x32x768", "--flags=G",
               "4x33", "--dir=BWD_DW", "--flags=CH", "2x3x40", "--dir=BWD_D", "--flags=",
               "3x2x17", "--dir=FWD_I", "--flags=GCH", "--tag=bac", "--stat_tag=ba", "4x6x10"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("check,passed,lnorm") == 5


def test_perf_mode(capsys):
    rc = main(["--lnorm", "--mode=P", "--min-seconds=0", "--dir=FWD_D", "--flags=CH",
               "4x8x64", "--dir=BWD_DW", "4x8x64"])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = [ln for ln in out.splitlines() if ln.startswith("perf,lnorm")]
    assert len(lines) == 2 and all("copy_gbs=" in ln and "," in ln for ln in lines)
