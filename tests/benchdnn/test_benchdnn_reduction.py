"""python -m pydnnl.benchdnn --reduction: benchdnn's options and problems, correctness and
performance lines."""
from __future__ import annotations

import pathlib
import sys

import pytest

import pydnnl as dnnl
from pydnnl.benchdnn import reduction as drv

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_cli import main  # noqa: E402


def test_algorithms_parse_as_benchdnn():
    assert drv.parse_alg("sum") == dnnl.algorithm.reduction_sum
    assert drv.parse_alg("reduction_norm_lp_power_p_max") == \
        dnnl.algorithm.reduction_norm_lp_power_p_max
    with pytest.raises(dnnl.invalid_arguments):
        drv.parse_alg("median")


def test_correctness_mode(capsys):
    rc = main(["--reduction", "--mode=C", "--alg=sum", "--p=1", "--eps=0",
               "8x16x32x32:8x16x1x1", "--reduction", "--mode=C",
               "--alg=max,mean,norm_lp_max,norm_lp_power_p_sum", "--p=2", "--eps=0.5",
               "--stag=axb", "4x8x5x5:1x8x1x1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("check,passed") == 5 and "FAILED" not in out


def test_performance_line(capsys):
    rc = main(["--reduction", "--mode=P", "--min-seconds=0", "--alg=sum", "--compare=torch",
               "8x16x32x32:8x16x1x1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    line = next(ln for ln in out.splitlines() if ln.startswith("perf,reduction"))
    assert "gbs=" in line and "copy_gbs=" in line and "torch" in line


def test_bad_problems_are_refused(first_engine):
    eng = first_engine
    with pytest.raises(dnnl.invalid_arguments):
        drv.run(eng, "8x16", {}, "C", None, 0)
    with pytest.raises(dnnl.invalid_arguments):
        drv.run(eng, "8x16:8x16", {}, "C", None, 0)
    with pytest.raises(dnnl.invalid_arguments):
        drv.run(eng, "8x16:8x1", {"axis": "1"}, "C", None, 0)
