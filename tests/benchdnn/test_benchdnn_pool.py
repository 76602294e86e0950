"""benchdnn's pooling driver: problem parsing (benchdnn's deduction rules), correctness mode
over algorithms, directions and layouts in 1-D, 2-D and 3-D, and one timing run."""
from __future__ import annotations

import pathlib
import sys

import pytest

import pydnnl as dnnl
from pydnnl.benchdnn import pool as drv

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_cli import main  # noqa: E402


def test_parse_problem_deduces_like_benchdnn():
    p = drv.parse_problem("mb2ic16ih32oh16kh3sh2ph1")
    assert (p.mb, p.ic, p.src, p.dst, p.kernel, p.strides) == (2, 16, (32, 32), (16, 16),
                                                                 (3, 3), (2, 2))
    # (o-1)*s - i + ext - p = 15*2 - 32 + 3 - 1
    assert p.padding_l == (1, 1) and p.padding_r == (0, 0) and p.dilation == (0, 0)
    assert p.to_str() == "mb2ic16ih32oh16kh3sh2ph1"
    q = drv.parse_problem("ic8_iw20_kw3")  # 1-D, mb 2, output from the input
    assert (q.mb, q.src, q.dst, q.padding_l, q.padding_r) == (2, (20,), (18,), (0,), (0,))
    r = drv.parse_problem("mb1ic4id6ih8iw10_od3oh4ow5_kd2kh3kw2_sd2sh2sw2_dd0dh1dw0_ntest")
    assert (r.src, r.dst, r.kernel, r.dilation, r.name) == ((6, 8, 10), (3, 4, 5), (2, 3, 2),
                                                             (0, 1, 0), "test")
    # padding deduced from the output: ((o-1)*s - i + ext) / 2, the rest on the right
    assert r.padding_l == (0, 1, 0) and r.padding_r == (0, 2, 0)  # h: ext 5, (6 - 8 + 5) / 2
    s = drv.parse_problem("ic3ih7oh4kh3")  # output given: padding (3 - 7 + 3) / 2 = 0 in C
    assert s.padding_l == (0, 0) and s.padding_r == (-1, -1)
    with pytest.raises(dnnl.invalid_arguments, match="ic"):
        drv.parse_problem("mb2ih8kh2")
    with pytest.raises(dnnl.invalid_arguments, match="cannot parse"):
        drv.parse_problem("mb2ic8ih8kh2zz")


def test_parse_options():
    assert drv.parse_alg("MAX") == dnnl.algorithm.pooling_max
    assert drv.parse_alg("avg_np") == dnnl.algorithm.pooling_avg_exclude_padding
    assert drv.parse_alg("pooling_avg_include_padding") == \
        dnnl.algorithm.pooling_avg_include_padding
    with pytest.raises(dnnl.invalid_arguments, match="--alg"):
        drv.parse_alg("min")
    assert drv.parse_dir("bwd_d") == dnnl.prop_kind.backward_data
    with pytest.raises(dnnl.invalid_arguments, match="--dir"):
        drv.parse_dir("BWD_W")


def test_check_mode_passes(capsys):
    rc = main(["--pool", "--mode=C", "--alg=max,avg_np,avg_p", "--dir=FWD_D,FWD_I,BWD_D",
               "--tag=abx,axb,aBx16b", "mb2ic16ih12oh6kh3sh2ph1",
               "--tag=abx", "mb1ic3iw11kw3sw2pw1dw1", "mb1ic2id4ih5iw6kd2kh3kw3ph1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("check,passed") == 27 + 9 + 9 and "FAILED" not in out, out


def test_check_mode_mb_override_and_bad_options(capsys):
    rc = main(["--pool", "--mode=C", "--mb=3", "mb2ic4ih6kh2sh2"])
    out = capsys.readouterr().out
    assert rc == 0 and "mb3ic4ih6oh3kh2sh2" in out, out
    with pytest.raises(SystemExit, match="f32, bf16 and f16"):
        main(["--pool", "--mode=C", "--dt=s8", "mb2ic4ih6kh2"])
    with pytest.raises(SystemExit, match="unknown option"):
        main(["--pool", "--mode=C", "--axis=1", "mb2ic4ih6kh2"])


def test_perf_mode_prints_bandwidth(capsys):
    rc = main(["--pool", "--mode=P", "--min-seconds=0", "--compare=torch", "--alg=max",
               "--dir=FWD_D", "mb2ic16ih32oh16kh3sh2ph1"])
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("perf,pool"))
    assert rc == 0 and "gbs=" in line and "copy_gbs=" in line and "torch" in line, out


def test_post_ops_check_mode_and_refusals(capsys):
    # binary and eltwise entries are fused (oneDNN's set for pooling); a sum entry and
    # backward post-ops are refused with benchdnn's unimplemented line
    rc = main(["--pool", "--mode=C", "--alg=max,avg_p", "--dir=FWD_D,BWD_D",
               "--attr-post-ops=add:f32:per_oc+relu,sum", "mb2ic16ih7oh4kh3sh2ph1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    passed = [ln for ln in out.splitlines() if ln.startswith("check,passed")]
    assert len(passed) == 2 and all("--dir=FWD_D" in ln and
                                    "--attr-post-ops=add:f32:per_oc+relu" in ln
                                    for ln in passed), out
    skips = [ln for ln in out.splitlines() if ln.startswith("skip,unimplemented,pool")]
    assert len(skips) == 6 and "FAILED" not in out, out
    assert sum("--dir=FWD_D" in ln and "--attr-post-ops=sum" in ln and "(sum)" in ln
               for ln in skips) == 2
    assert sum("pooling_backward" in ln for ln in skips) == 4
