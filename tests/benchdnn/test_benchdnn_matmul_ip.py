"""python -m pydnnl.benchdnn --matmul / --ip, and --attr-post-ops on --conv: correctness mode
against numpy, performance lines."""
from __future__ import annotations

import pathlib
import re
import sys

import pytest

from pydnnl.benchdnn.common import parse_post_ops

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_cli import main  # noqa: E402


def test_matmul_and_ip_correctness_mode(capsys):
    rc = main(["--matmul", "--mode=C", "5x7:7x9", "--bia_dt=f32",
               "--attr-post-ops=sum:0.5+gelu_erf+add:f32:per_oc", "2x3x4x5:2x1x5x6",
               "--dtag=ba", "6x8:8x4",
               "--ip", "--mode=C", "mb4ic8ih3iw3oc5", "--dir=FWD_D",
               "--attr-post-ops=sum:2+relu+mul:f32:per_tensor", "mb4ic8oc5",
               "--reset", "--ip", "--mode=C", "--dir=BWD_D", "mb4ic8ih3iw3oc5",
               "--dir=BWD_WB", "mb4ic8ih3iw3oc5",
               "--conv", "--mode=C", "--attr-post-ops=sum:0.5+relu+add:f32:per_oc",
               "mb2ic8ih6oc8oh6kh3ph1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("check,passed") == 8 and "FAILED" not in out, out


def test_performance_lines(capsys):
    rc = main(["--matmul", "--min-seconds=0", "--compare=numpy", "16x32:32x8",
               "--ip", "--min-seconds=0", "--compare=numpy", "mb4ic16oc8"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = [ln for ln in out.splitlines() if ln.startswith("perf,")]
    assert len(lines) == 2, out
    for ln in lines:
        assert re.search(r"min_ms=[0-9.]+", ln) and re.search(r"gflops=[0-9.]+", ln), ln
        assert re.search(r"speed_vs_numpy=[0-9.]+x", ln), ln


def test_post_op_syntax():
    po = parse_post_ops("sum:0.5:1+relu:0.1+add:f32:per_oc+max:f32:per_dim_0", [2, 3, 4])
    assert [po.kind(i) for i in range(4)] == ["sum", "eltwise", "binary", "binary"]
    assert po.get_params_sum(0)[:2] == (0.5, 1)
    assert list(po.get_params_binary(2)[1].dims) == [1, 3, 1]
    assert list(po.get_params_binary(3)[1].dims) == [2, 1, 1]
    with pytest.raises(SystemExit, match="unknown entry"):
        main(["--matmul", "--attr-post-ops=nope", "2x2:2x2"])
