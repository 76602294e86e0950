"""benchdnn --bnorm: problem and flag parsing as benchdnn spells them, correctness mode over
directions, flags and layouts, and one timing run."""
from __future__ import annotations

import pathlib
import sys

import pytest

import pydnnl as dnnl
from pydnnl.benchdnn.bnorm import parse_flags, parse_problem

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_cli import main  # noqa: E402

F = dnnl.normalization_flags


def test_problem_syntax():
    assert parse_problem("mb8ic32ih14iw14") == ([8, 32, 14, 14], 1.0 / 16, "")
    assert parse_problem("ic16ih10")[0] == [2, 16, 10, 10]            # mb 2, iw = ih
    assert parse_problem("mb2ic3id4")[0] == [2, 3, 4, 4, 4]
    assert parse_problem("mb2ic3iw5")[0] == [2, 3, 5]
    assert parse_problem("mb4ic7")[0] == [4, 7]
    assert parse_problem("mb96_ic192_ih71iw71_eps0.5_n\"v3:bn\"") == (
        [96, 192, 71, 71], 0.5, "v3:bn")
    assert parse_problem("mb8ic32ih14", mb_override=1)[0] == [1, 32, 14, 14]
    with pytest.raises(dnnl.invalid_arguments, match="ic required"):
        parse_problem("mb8ih14")


def test_flag_letters():
    assert parse_flags("GSR", "GCHRSA") == F.use_global_stats | F.use_scale | F.use_shift | \
        F.fuse_norm_relu
    assert parse_flags("CH", "GCHRSA") == F.use_scale | F.use_shift
    assert parse_flags("A", "GCHRSA") == F.fuse_norm_add_relu
    with pytest.raises(dnnl.invalid_arguments, match="unknown flag 'X'"):
        parse_flags("X", "GCHRSA")


def test_correctness_mode(capsys):
    rc = main(["--bnorm", "--mode=C", "--dir=FWD_D", "--flags=GSR", "mb2ic5ih3iw4",
               "--flags=CHR", "mb2ic5ih3iw4", "--tag=nhwc", "--dir=BWD_DW", "mb3ic6ih2",
               "--dir=FWD_I", "--flags=", "--tag=abx", "mb2ic4iw7", "--tag=nChw8c", "--dir=BWD_D",
               "--flags=R", "mb2ic9ih3"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("check,passed,bnorm") == 5


def test_perf_mode(capsys):
    rc = main(["--bnorm", "--mode=P", "--min-seconds=0", "--dir=FWD_D", "--flags=CH",
               "mb2ic8ih6iw6", "--dir=BWD_DW", "mb2ic8ih6iw6"])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = [ln for ln in out.splitlines() if ln.startswith("perf,bnorm")]
    assert len(lines) == 2 and all("copy_gbs=" in ln for ln in lines)
