"""python -m pydnnl.benchdnn --conv/--deconv with bf16 and f16 data: ``--dt`` (one type or
SRC:WEI:DST), the deprecated ``--cfg`` names, the per-type tolerance of correctness mode, and
the combinations oneDNN's table lacks reported as UNIMPLEMENTED."""
from __future__ import annotations

import pathlib
import re
import sys

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.benchdnn import conv as conv_drv
from pydnnl.benchdnn.conv_problem import parse_conv_problem
from pydnnl.error import invalid_arguments
from pydnnl.memory.data_types import bf16_bits_to_f32, f32_to_bf16_bits

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_cli import main  # noqa: E402


@pytest.mark.parametrize("text, want", [
    ("", ("f32",) * 3), ("bf16", ("bf16",) * 3), ("F16", ("f16",) * 3),
    ("bf16:bf16:f32", ("bf16", "bf16", "f32")),
    ("bf16bf16bf16", ("bf16",) * 3), ("f16", ("f16",) * 3),  # --cfg names
    ("bf16f32bf16", ("bf16", "f32", "bf16")), ("f32bf16bf16", ("f32", "bf16", "bf16")),
    ("u8s8f32", ("u8", "s8", "f32")),
])
def test_dt_and_legacy_cfg_names(text, want):
    assert conv_drv.parse_dt(text) == want


@pytest.mark.parametrize("text", ["bf17", "bf16:f32", "f32:f32:f32:f32", "undef"])
def test_bad_dt_names_the_option(text):
    with pytest.raises(invalid_arguments, match="--dt"):
        conv_drv.parse_dt(text)


def test_dt_and_cfg_that_disagree_are_refused(capsys):
    assert conv_drv.dt_option({"dt": "bf16", "cfg": "bf16bf16bf16"}) == "bf16"
    with pytest.raises(SystemExit, match="--dt=f16 and --cfg=bf16bf16bf16"):
        main(["--conv", "--mode=C", "--cfg=bf16bf16bf16", "--dt=f16", "mb1ic4ih5oc4oh5kh3ph1"])


def test_correctness_mode_every_direction_and_type(capsys):
    desc = "g2mb2ic8ih7oc6oh4kh3sh2ph1"
    rc = main(["--conv", "--mode=C", "--dir=FWD_B,BWD_D,BWD_WB", "--dt=bf16,f16", desc,
               "--dir=FWD_D", "--dt=bf16:bf16:f32", desc,
               "--reset", "--dir=BWD_W", "--cfg=bf16f32bf16", desc,
               "--reset", "--dir=FWD_B", "--dt=f32:bf16:f32,f32:f16:f32", desc,
               "--reset", "--dir=FWD_B", "--dt=f32:bf16:bf16", desc])
    out = capsys.readouterr().out
    assert rc == 0, out
    checks = [ln for ln in out.splitlines() if ln.startswith("check,")]
    assert len(checks) == 10 and all(",passed," in ln for ln in checks), out
    assert sum("--dt=bf16 " in ln for ln in checks) == 3
    assert any("--dt=bf16:f32:bf16 --dir=BWD_W" in ln for ln in checks)
    assert any("--dt=f32:f16:f32 --dir=FWD_B" in ln for ln in checks)
    # f32 src with bf16 weights takes an f32 dst only: the primitive's own message
    unimpl = [ln for ln in out.splitlines() if re.match(r"\d+:UNIMPLEMENTED", ln)]
    assert len(unimpl) == 1 and "dst_desc data type bf16 with src_desc f32" in unimpl[0]
    assert re.search(r"tests:11 passed:10 .*unimplemented:1 .*failed:0", out), out


def test_deconvolution_with_bf16(capsys):
    rc = main(["--deconv", "--mode=C", "--dir=FWD_B,BWD_D,BWD_WB", "--dt=bf16",
               "mb2ic4ih4oc6oh8kh3sh2ph1"])
    out = capsys.readouterr().out
    assert rc == 0 and re.search(r"tests:3 passed:3 ", out), out


def test_the_reference_reads_the_rounded_inputs_and_the_output_type_sets_the_tolerance(
        cpu_engine):
    p = parse_conv_problem("mb2ic4ih6oc5oh6kh3ph1")
    f32 = conv_drv.ConvBench(cpu_engine, p, conv_drv.ConvOptions(dir="FWD_B"))
    low = conv_drv.ConvBench(cpu_engine, p, conv_drv.ConvOptions(dir="FWD_B",
                                                                 dt=("bf16",) * 3))
    x32, x16 = f32.values[dnnl.ARG_SRC], low.values[dnnl.ARG_SRC]  # same seed
    np.testing.assert_array_equal(x16, bf16_bits_to_f32(f32_to_bf16_bits(x32)))
    assert low.pd.dst_desc().data_type == dnnl.memory.data_type.bf16
    assert low.pd.bias_desc().data_type == dnnl.memory.data_type.bf16  # the output's type
    # 36 summed terms: the f32 figure of the solver, plus bf16's unit roundoff of the output
    f = {"winograd_f2x3": 3e-5, "fft": 2e-5}.get(low.solver, 1e-5)
    assert low.tolerance() == pytest.approx(f + 2.0 ** -8 * (1 + f))
    err = low.check()
    assert err <= low.tolerance()
    wide = conv_drv.ConvBench(cpu_engine, p, conv_drv.ConvOptions(
        dir="FWD_B", dt=("bf16", "bf16", "f32")))  # an f32 dst is not rounded again
    assert wide.tolerance() <= 3e-5 and wide.check() <= wide.tolerance()


def test_int8_per_channel_zero_points(capsys):
    """benchdnn's per_dim_1 zero points on an int8 convolution (src per input channel, dst
    per output channel or common), grouped, strided and padded, checked against the int64
    reference with the varied per-channel values the bench fills."""
    desc = "g2mb2ic8ih7oc6oh4kh3sh2ph1"
    rc = main(["--conv", "--mode=C", "--dir=FWD_I", "--dt=u8:s8:s32,s8:s8:f32",
               "--attr-zero-points=src:per_dim_1+dst:per_dim_1,src:per_dim_1+dst:common:1",
               desc])
    out = capsys.readouterr().out
    assert rc == 0 and re.search(r"tests:4 passed:4 ", out), out
