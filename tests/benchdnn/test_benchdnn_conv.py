"""python -m pydnnl.benchdnn --conv: correctness mode, performance lines, the torch peer, errors."""
from __future__ import annotations

import pathlib
import re
import sys

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.benchdnn import conv as conv_drv
from pydnnl.benchdnn.conv_problem import parse_conv_problem
from pydnnl.reference import conv as R

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_cli import main  # noqa: E402


def _lines(out: str, kind: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith(kind + ",")]


def test_correctness_mode_every_direction(capsys):
    # the driver compares each output with the float64 numpy reference
    rc = main(["--conv", "--mode=C",
               "--dir=FWD_B", "mb2ic5ih7oc6oh7kh3ph1",
               "--dir=BWD_D", "mb2ic5ih7oc6oh4kh3sh2ph1",
               "--dir=BWD_WB", "mb2ic5ih7oc6oh7kh3ph1",
               "--dir=FWD_D", "--alg=im2col_gemm", "g2mb2ic4ih6oc6oh6kh3ph1",
               "--dir=BWD_W", "--alg=direct", "g3mb1ic6iw9oc3kw3dw1pw2"])
    out = capsys.readouterr().out
    assert rc == 0, out
    checks = _lines(out, "check")
    assert len(checks) == 5 and all(",passed," in ln for ln in checks), out
    assert "solver=im2col_gemm" in checks[3] and "solver=direct" in checks[4]
    assert "--dir=BWD_WB" in checks[2] and ",g2ic4ih6" in checks[3]


def test_mb_override_and_batch_file(tmp_path, capsys):
    batch = tmp_path / "list.txt"
    batch.write_text('# two layers\n--dir=BWD_D\nmb1ic4ih5oc4oh5kh3ph1n"a:b*2"\n'
                     "mb1ic4ih6oc8oh3kh1sh2ph0\n")
    rc = main(["--conv", "--mode=C", "--mb=3", f"--batch={batch}"])
    out = capsys.readouterr().out
    assert rc == 0, out
    checks = _lines(out, "check")
    assert len(checks) == 2 and all(",passed," in ln for ln in checks), out
    assert "mb3ic4ih5" in checks[0] and 'n"a:b*2"' in checks[0] and "--dir=BWD_D" in checks[1]


def test_performance_line_and_output_shape(cpu_engine, capsys):
    p = parse_conv_problem("mb2ic3ih6oc4oh3kh3sh2ph1")
    b = conv_drv.ConvBench(cpu_engine, p, conv_drv.ConvOptions())
    b.run()
    b.stream.wait()
    assert b.args[dnnl.ARG_DST].to_numpy().shape == (2, 4, 3, 3)
    rc = main(["--conv", "--min-seconds=0", "--dir=FWD_I", "mb2ic3ih6oc4oh3kh3sh2ph1"])
    out = capsys.readouterr().out
    assert rc == 0
    (line,) = _lines(out, "perf")
    assert "--dir=FWD_I" in line and ",ic3ih6oc4oh3kh3sh2ph1," in line  # mb2: the default
    for field in ("min_ms", "median_ms", "gflops", "create_ms"):
        assert re.search(rf"{field}=[0-9.]+", line), line
    assert re.search(r"solver=(direct|im2col_gemm|winograd_f2x3)", line)


def test_unimplemented_algorithm_is_skipped(capsys):
    rc = main(["--conv", "--mode=C", "--alg=winograd", "--dir=BWD_W", "mb1ic4ih5oc4oh3kh3sh2ph1"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count("skip,unimplemented") == 1 and "needs stride 1" in out


@pytest.mark.parametrize("argv, words", [
    (["--conv", "mb1ic4ih5oc4oh5kh3ph1xyz"], ["xyz", "unrecognized"]),
    (["--conv", "mb1ic4ih5oc4oh5ph1"], ["`kh`", "not specified"]),
    (["--conv", "g3mb1ic4ih5oc4kh3"], ["divisible", "g=3"]),
    (["--conv", "--dir=SIDEWAYS", "mb1ic4ih5oc4kh3"], ["--dir", "BWD_WB", "SIDEWAYS"]),
    (["--conv", "--alg=fourier", "mb1ic4ih5oc4kh3"], ["--alg", "im2col_gemm", "fft", "fourier"]),
])
def test_bad_input_gives_a_clear_error(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    msg = str(e.value.code)
    for w in words:
        assert w in msg, msg
    assert "perf," not in capsys.readouterr().out


def _torch():
    return pytest.importorskip("torch", reason="the torch comparison needs PyTorch")


@pytest.mark.parametrize("direction, desc", [
    ("FWD_B", "g2mb2ic4ih7oc6oh4kh3sh2ph1"),
    ("FWD_B", "mb1ic3ih6oc2oh3kh1sh2ph0"),          # negative right padding (benchdnn)
    ("FWD_D", "mb1ic2ih5iw6oc3oh5ow4kh2kw3ph1pw1"),  # asymmetric: explicit torch padding
    ("BWD_D", "mb1ic2ih5iw6oc3oh5ow4kh2kw3ph1pw1"),
    ("BWD_D", "mb2ic4iw9oc2kw3sw2dw1pw2"),
    ("BWD_WB", "g2mb2ic4ih7oc6oh4kh3sh2ph1"),
    ("BWD_W", "mb1ic2id4oc3kd2pd1"),
])
def test_torch_peer_computes_the_same_problem(direction, desc):
    """What the driver times in torch equals the numpy reference of the benchdnn problem."""
    torch = _torch()
    p = parse_conv_problem(desc)
    step, t = conv_drv.torch_problem(p, conv_drv.ConvOptions(dir=direction))
    x, w, dy = (t[k].numpy().astype(np.float64) for k in ("x", "w", "dy"))
    geo = (p.strides, p.dilates, p.padding_l, p.padding_r)
    d, _, bias = conv_drv.DIRS[direction]
    with torch.no_grad():
        got = step()
    if d == "fwd":
        b = t["b"].numpy() if bias else None
        want = [R.conv_forward(x, w, b, *geo, groups=p.g, dtype=np.float64)]
        got = [got]
    elif d == "bwd_d":
        want = [R.conv_backward_data(dy, w, p.src_dims(), *geo, groups=p.g, dtype=np.float64)]
        got = [got]
    else:
        dw, db = R.conv_backward_weights(x, dy, w.shape, *geo, groups=p.g, with_bias=bias,
                                         dtype=np.float64)
        want, got = ([dw, db], list(got)) if bias else ([dw], [got[0]])
    for g_, w_ in zip(got, want):
        g_ = g_.numpy()
        assert g_.shape == w_.shape
        np.testing.assert_allclose(g_, w_, rtol=0, atol=1e-5 * np.abs(w_).max())


def test_performance_line_with_torch(capsys):
    _torch()
    rc = main(["--conv", "--min-seconds=0", "--compare=torch", "--dir=BWD_W",
               "mb1ic4ih6oc4oh6kh3ph1"])
    out = capsys.readouterr().out
    assert rc == 0
    (line,) = _lines(out, "perf")
    assert re.search(r"torch_min_ms=[0-9.]+,torch_median_ms=[0-9.]+,ratio=[0-9.]+", line), line


def test_missing_torch_is_reported(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    rc = main(["--conv", "--min-seconds=0", "--compare=torch", "mb1ic4ih6oc4oh6kh3ph1"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "PyTorch is not installed" in out
    (line,) = _lines(out, "perf")
    assert "torch_min_ms" not in line


def test_workspace_limit_is_the_smaller_of_max_allocation_and_half_the_memory(cpu_engine):
    from dataclasses import replace

    from pydnnl.runtime.heuristics.conv import workspace_limit

    info = cpu_engine.info
    assert workspace_limit(replace(info, global_mem_bytes=16 << 30, max_mem_alloc_bytes=4 << 30)) \
        == 4 << 30
    assert workspace_limit(replace(info, global_mem_bytes=16 << 30, max_mem_alloc_bytes=12 << 30)) \
        == 8 << 30
    assert workspace_limit(replace(info, global_mem_bytes=16 << 30, max_mem_alloc_bytes=0)) \
        == 8 << 30


def test_solvers_too_big_for_the_device_are_passed_over(cpu_engine, monkeypatch):
    import pydnnl.primitives.conv.pd as conv_pd
    from pydnnl.benchdnn.conv import ConvBench, ConvOptions
    from pydnnl.benchdnn.conv_problem import parse_conv_problem
    from pydnnl.error import out_of_memory

    p = parse_conv_problem("mb2ic8ih12oc8oh12kh3ph1")
    sizes = {"im2col_gemm": ConvBench(cpu_engine, p, ConvOptions(alg="im2col_gemm"))
             .pd.workspace_bytes()}
    assert sizes["im2col_gemm"] > 0
    monkeypatch.setattr(conv_pd, "workspace_limit", lambda info: sizes["im2col_gemm"] - 1)
    b = ConvBench(cpu_engine, p, ConvOptions(alg="auto"))
    assert b.pd.workspace_bytes() < sizes["im2col_gemm"] and b.check() <= b.tolerance()
    with pytest.raises(out_of_memory) as e:
        ConvBench(cpu_engine, p, ConvOptions(alg="im2col_gemm"))
    msg = str(e.value)
    assert f"{sizes['im2col_gemm']} bytes" in msg and f"limit of {sizes['im2col_gemm'] - 1}" in msg


# --- deconvolution (--deconv) ---------------------------------------------------------------
@pytest.mark.parametrize("desc, src, dst, pl, pr", [
    # o given, p given: p_r = (i-1)*s - o + ((k-1)*(d+1)+1) - p = 7 - 5 + 3 - 3
    ('g1oc17ic16_ow5iw8kw3pw3_n"deconv_ci_1d:oc_tail_gemm"', (2, 16, 8), (2, 17, 5), (3,), (2,)),
    # o deduced: (i-1)*s + ((k-1)*(d+1)+1) - 2p = 4*2 + 3 - 2
    ("mb2ic4ih5oc6kh3sh2ph1", (2, 4, 5, 5), (2, 6, 9, 9), (1, 1), (1, 1)),
    # p deduced: ((i-1)*s - o + ext) / 2 = (8 - 10 + 3) / 2 = 0, then p_r = 1
    ("mb1ic4ih5oc6oh10kh3sh2", (1, 4, 5, 5), (1, 6, 10, 10), (0, 0), (1, 1)),
    # dilation: ext = (3-1)*(1+1)+1 = 5, o = 4 + 5 - 2 = 7
    ("mb1ic2iw5oc3kw3dw1pw1", (1, 2, 5), (1, 3, 7), (1,), (1,)),
])
def test_deconv_problem_follows_benchdnns_deconv_rules(desc, src, dst, pl, pr):
    p = parse_conv_problem(desc, deconv=True)
    assert p.deconvolution and p.src_dims() == src and p.dst_dims() == dst
    assert p.padding_l == pl and p.padding_r == pr
    x = np.zeros(src)
    w = np.zeros(p.weights_dims())  # [G, OC/G, IC/G, k...] or [OC, IC, k...]
    assert R.deconv_forward(x, w, None, p.strides, p.dilates, p.padding_l,
                            p.padding_r).shape == dst
    assert parse_conv_problem(p.to_str(), deconv=True) == p
    assert p.flops() == p.as_convolution().flops()  # benchdnn counts the transposed conv


def _deconv_1d_closed_form(x, w, b, s, d, pl, out_w):
    """dst[n, oc, i*s - pl + k*(d+1)] += src[n, ic, i] * w[oc, ic, k] (+ bias), by loops."""
    n_, ic_, iw = x.shape
    oc_, _, kw = w.shape
    y = np.zeros((n_, oc_, out_w)) + (0 if b is None else b[None, :, None])
    for n in range(n_):
        for oc in range(oc_):
            for ic in range(ic_):
                for i in range(iw):
                    for k in range(kw):
                        o = i * s - pl + k * (d + 1)
                        if 0 <= o < out_w:
                            y[n, oc, o] += x[n, ic, i] * w[oc, ic, k]
    return y


def test_deconv_forward_output_matches_a_closed_form(cpu_engine):
    p = parse_conv_problem("mb2ic3iw4oc5kw3sw2pw1", deconv=True)
    b = conv_drv.ConvBench(cpu_engine, p, conv_drv.ConvOptions(dir="FWD_B"))
    assert b.check() <= b.tolerance()
    v = b.values
    want = _deconv_1d_closed_form(v[dnnl.ARG_SRC].astype(np.float64),
                                  v[dnnl.ARG_WEIGHTS].astype(np.float64),
                                  v[dnnl.ARG_BIAS].astype(np.float64), 2, 0, 1, p.dst_dims()[2])
    got = b.args[dnnl.ARG_DST].to_numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_deconv_correctness_mode_every_direction(capsys):
    rc = main(["--deconv", "--mode=C",
               "--dir=FWD_B", "--attr-post-ops=linear:2:1", "g2mb2ic4ih5oc6kh3sh2ph1",
               "--attr-post-ops=", "--dir=FWD_D", "--stag=axb", "--dtag=axb", "mb1ic3iw6oc4kw3pw1",
               "--stag=any", "--dtag=any",
               "--dir=BWD_D", "g2mb2ic4ih5oc6kh3sh2ph1",
               "--dir=BWD_WB", "g2mb2ic4ih5oc6kh3sh2ph1",
               "--dir=BWD_W", "mb1ic3id3oc2kd2dd1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    checks = _lines(out, "check")
    assert len(checks) == 5 and all(",passed," in ln for ln in checks), out
    assert "tests:5 passed:5" in out
    assert "g2ic4ih5oc6oh9kh3sh2ph1" in checks[0]  # benchdnn's deconv output size


@pytest.mark.parametrize("direction", ["BWD_D", "BWD_WB"])
def test_backward_passes_take_the_fpmath_mode(cpu_engine, direction):
    """``--attr-fpmath`` reaches the backward descriptors as it does the forward one (oneDNN's
    CI runs BWD_D with tf32): their attributes report the mode asked for."""
    p = parse_conv_problem("mb2ic3ih6oc4oh3kh3sh2ph1")
    for mode in ("tf32", "bf16"):
        o = conv_drv.ConvOptions(dir=direction, fpmath=mode)
        b = conv_drv.ConvBench(cpu_engine, p, o)
        assert b.pd.get_primitive_attr().get_fpmath_mode() \
            == getattr(dnnl.fpmath_mode, mode), (direction, mode)
