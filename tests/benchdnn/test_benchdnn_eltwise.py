"""benchdnn's eltwise driver: option and problem parsing, correctness mode over algorithms,
directions, layouts and in-place use, and one timing run."""
from __future__ import annotations

import pytest

import pydnnl as dnnl
from pydnnl.benchdnn import eltwise as drv
from pydnnl.benchdnn.__main__ import main

A = dnnl.algorithm


def test_parse_alg_and_dir():
    assert drv.parse_alg("RELU") == A.eltwise_relu
    assert drv.parse_alg("srelu") == A.eltwise_soft_relu
    assert drv.parse_alg("soft_relu") == A.eltwise_soft_relu
    assert drv.parse_alg("CLIP_V2_DST") == A.eltwise_clip_v2_use_dst_for_bwd
    assert drv.parse_alg("gelu_erf") == A.eltwise_gelu_erf
    assert drv.parse_alg("eltwise_exp_use_dst_for_bwd") == A.eltwise_exp_use_dst_for_bwd
    with pytest.raises(dnnl.invalid_arguments, match="--alg"):
        drv.parse_alg("softmax")
    assert drv.parse_dir("bwd_d") == dnnl.prop_kind.backward_data
    assert drv.parse_dir("FWD_I") == dnnl.prop_kind.forward_inference
    with pytest.raises(dnnl.invalid_arguments, match="--dir"):
        drv.parse_dir("BWD_W")
    assert drv._tag("abx", 4) == "abcd" and drv._tag("axb", 4) == "acdb"
    assert drv._tag("aBx16b", 4) == "nChw16c" and drv._tag("nhwc", 4) == "nhwc"


def test_check_mode_passes(capsys):
    rc = main(["--eltwise", "--mode=C", "--alg=relu,elu_dst,gelu_tanh,clip,pow,round,log",
               "--alpha=0,0.5", "--beta=0,1", "--dir=FWD_D,BWD_D", "--tag=abx,axb,aBx16b",
               "3x17x2x3"])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = [ln for ln in out.splitlines() if ln.startswith(("check", "skip"))]
    assert sum(ln.startswith("check,passed") for ln in lines) >= 100
    assert not any("FAILED" in ln for ln in lines)
    # round has no backward; clip needs alpha <= beta: skipped, as benchdnn does
    assert any(ln.startswith("skip,invalid_arguments") and "--dir=BWD_D --alg=round" in ln
               for ln in lines)
    assert any(ln.startswith("skip,invalid_arguments") and "--alg=clip --alpha=0.5 --beta=0 "
               in ln for ln in lines)


def test_check_mode_in_place_and_mb(capsys):
    rc = main(["--eltwise", "--mode=C", "--alg=tanh_dst", "--dir=FWD_D,BWD_D",
               "--inplace=true", "--mb=2", "7x5x4"])
    out = capsys.readouterr().out
    assert rc == 0 and out.count("check,passed") == 2 and "2x5x4" in out, out


def test_perf_mode_prints_bandwidth(capsys):
    rc = main(["--eltwise", "--mode=P", "--min-seconds=0", "--compare=torch", "--alg=relu",
               "--alpha=0.1", "8x16x32x32"])
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("perf,eltwise"))
    assert rc == 0 and "gbs=" in line and "copy_gbs=" in line and "torch" in line, out


def test_bad_options():
    with pytest.raises(SystemExit, match="dt"):
        main(["--eltwise", "--mode=C", "--dt=s8", "2x3"])
    with pytest.raises(SystemExit, match="unknown option"):
        main(["--eltwise", "--mode=C", "--axis=1", "2x3"])
    with pytest.raises(SystemExit, match="problem"):
        main(["--eltwise", "--mode=C", "2xx3"])
