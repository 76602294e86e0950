"""python -m pydnnl.benchdnn --softmax: benchdnn's options and problems, correctness and
performance lines."""
from __future__ import annotations

import pathlib
import sys

import pytest

import pydnnl as dnnl
from pydnnl.benchdnn import softmax as drv

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_cli import main  # noqa: E402


def test_options_parse_as_benchdnn():
    assert drv.parse_alg("SOFTMAX") == dnnl.algorithm.softmax_accurate
    assert drv.parse_alg("logsoftmax") == dnnl.algorithm.softmax_log
    assert drv.parse_dir("BWD_D") == dnnl.prop_kind.backward_data
    assert drv.parse_tag("axb", 4) == "acdb" and drv.parse_tag("aBx16b", 4) == "nChw16c"
    with pytest.raises(dnnl.invalid_arguments):
        drv.parse_alg("SOFTMIN")


def test_correctness_mode(capsys):
    rc = main(["--softmax", "--mode=C", "--alg=SOFTMAX,LOGSOFTMAX", "--axis=1",
               "--dir=FWD_D,BWD_D", "8x1000", "--reset", "--softmax", "--mode=C", "--axis=1",
               "--stag=axb", "--inplace=true", "2x16x3x5", "--softmax", "--mode=C", "--axis=0",
               "--dir=FWD_I", "--stag=aBx16b", "4x20x2x2"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("check,passed") == 6 and "FAILED" not in out


def test_performance_line(capsys):
    rc = main(["--softmax", "--mode=P", "--min-seconds=0", "--dir=BWD_D", "--alg=LOGSOFTMAX",
               "--axis=1", "--compare=torch", "8x1000"])
    out = capsys.readouterr().out
    assert rc == 0, out
    line = next(ln for ln in out.splitlines() if ln.startswith("perf,softmax"))
    assert "gbs=" in line and "copy_gbs=" in line and "torch" in line


def test_unknown_option_is_refused(first_engine):
    with pytest.raises(dnnl.invalid_arguments):
        drv.run(first_engine, "8x10", {"flavour": "x"}, "C", None, 0)
    with pytest.raises(dnnl.unimplemented):
        drv.run(first_engine, "8x10", {"sdt": "s8"}, "C", None, 0)


def test_post_ops_check_mode_and_refusals(capsys):
    # binary and eltwise entries are fused (oneDNN's set for softmax); a sum entry and
    # backward post-ops are refused with benchdnn's unimplemented line
    rc = main(["--softmax", "--mode=C", "--alg=SOFTMAX,LOGSOFTMAX", "--axis=1",
               "--attr-post-ops=add:f32:per_oc+relu,sum", "--dir=FWD_D,BWD_D", "2x16x3x5"])
    out = capsys.readouterr().out
    assert rc == 0, out
    passed = [ln for ln in out.splitlines() if ln.startswith("check,passed")]
    assert len(passed) == 2 and all("--dir=FWD_D" in ln and
                                    "--attr-post-ops=add:f32:per_oc+relu" in ln
                                    for ln in passed), out
    skips = [ln for ln in out.splitlines() if ln.startswith("skip,unimplemented,softmax")]
    assert len(skips) == 6 and "FAILED" not in out, out
    assert sum("--dir=FWD_D" in ln and "--attr-post-ops=sum" in ln and "(sum)" in ln
               for ln in skips) == 2
    assert sum("softmax_backward" in ln for ln in skips) == 4
