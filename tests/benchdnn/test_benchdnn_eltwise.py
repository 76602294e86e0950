"""benchdnn's eltwise driver: option and problem parsing, correctness mode over algorithms,
directions, layouts and in-place use, and one timing run."""
from __future__ import annotations

import pathlib
import sys

import pytest

import pydnnl as dnnl
from pydnnl.benchdnn import eltwise as drv

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_cli import main  # noqa: E402

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


def test_post_ops_check_mode_and_refusals(capsys):
    # binary entries are fused (oneDNN's set for eltwise); an eltwise entry and backward
    # post-ops are refused with benchdnn's unimplemented line
    rc = main(["--eltwise", "--mode=C", "--alg=tanh", "--tag=abx,aBx8b",
               "--attr-post-ops=add:f32:per_oc+mul:f32:per_tensor,relu", "--dir=FWD_D,BWD_D",
               "2x16x3x5"])
    out = capsys.readouterr().out
    assert rc == 0, out
    passed = [ln for ln in out.splitlines() if ln.startswith("check,passed")]
    assert len(passed) == 2 and all("--dir=FWD_D" in ln and
                                    "--attr-post-ops=add:f32:per_oc+mul:f32:per_tensor" in ln
                                    for ln in passed), out
    skips = [ln for ln in out.splitlines() if ln.startswith("skip,unimplemented,eltwise")]
    assert len(skips) == 6 and "FAILED" not in out, out
    assert any("--attr-post-ops=relu" in ln and "binary post-ops only" in ln for ln in skips)
    assert sum("eltwise_backward" in ln for ln in skips) == 4


def test_post_ops_perf_line_with_torch(capsys):
    rc = main(["--eltwise", "--mode=P", "--min-seconds=0", "--compare=torch", "--alg=relu",
               "--attr-post-ops=add:f32:per_oc", "2x16x8x8"])
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("perf,eltwise"))
    assert rc == 0 and "--attr-post-ops=add:f32:per_oc" in line and "torch" in line, out
