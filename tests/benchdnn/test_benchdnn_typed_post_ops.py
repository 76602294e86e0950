"""benchdnn's ``--attr-post-ops`` with typed binary operands (``add:s8:per_oc``, as oneDNN's
input files write them) and prelu entries (``prelu:per_oc``): the operand memory has that
data type and mode C checks the fused chain against the float64 reference on the values the
operand stores."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.benchdnn.common import parse_post_ops, typed_values

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_cli import main  # noqa: E402

DT = dnnl.memory.data_type


def test_parser_gives_each_operand_its_data_type():
    po = parse_post_ops("add:s8:per_oc+mul:bf16:per_tensor+div:u8+sub:s32:per_dim_0+max:f16"
                        "+min", [2, 3, 4])
    dts = [po.get_params_binary(i)[1].data_type for i in range(po.len())]
    dims = [list(po.get_params_binary(i)[1].dims) for i in range(po.len())]
    assert dts == [DT.s8, DT.bf16, DT.u8, DT.s32, DT.f16, DT.f32]
    assert dims == [[1, 3, 1], [2, 3, 4], [1, 1, 1], [2, 1, 1], [1, 1, 1], [1, 1, 1]]
    with pytest.raises(dnnl.invalid_arguments, match="operand data type must be one of"):
        parse_post_ops("add:f64", [2, 3])
    po = parse_post_ops("prelu:per_oc+prelu+prelu:per_tensor+prelu:per_dim_0", [2, 3, 4])
    assert [po.get_params_prelu(i) for i in range(po.len())] == [2, 0, 7, 1]


def test_typed_values_are_nonzero_integers_away_from_zero():
    v = np.float32([-2.5, -0.1, 0.0, 0.3, 1.0, 300.0])
    assert typed_values(v, DT.s8).tolist() == [-3, -1, 1, 1, 2, 127]
    assert typed_values(v, DT.u8).tolist() == [3, 1, 1, 1, 2, 127]
    assert typed_values(v, DT.s32).dtype == np.int32
    assert typed_values(v, DT.bf16) is v and typed_values(v, DT.f32) is v


@pytest.mark.parametrize("argv", [
    ["--matmul", "--attr-post-ops=add:s8:per_oc+mul:bf16:per_tensor+div:u8", "4x8:8x5"],
    ["--ip", "--attr-post-ops=sub:s32:per_oc+add:f16", "mb3ic5oc7"],
    ["--conv", "--dir=FWD_B", "--attr-post-ops=mul:s8:per_oc+sum:0.25+relu:0.5+add:f32:per_tensor",
     "mb2ic3ih5oc17oh5kh3ph1"],
    ["--conv", "--dt=u8:s8:f32", "--dir=FWD_I", "--attr-post-ops=add:s8:per_oc",
     "mb2ic3ih5oc17oh5kh3ph1"],
    ["--eltwise", "--alg=relu", "--attr-post-ops=add:s8:per_oc+div:u8", "2x3x4x5"],
    ["--softmax", "--attr-post-ops=mul:u8:per_tensor", "4x10"],
    ["--pool", "--alg=max", "--attr-post-ops=add:s32:per_oc", "mb2ic3ih6oh3kh2sh2"],
    ["--binary", "--attr-post-ops=mul:s8:per_tensor", "2x3x4:2x3x4"],
    ["--matmul", "--attr-post-ops=prelu:per_oc+add:s8:per_tensor", "4x8:8x5"],
    ["--conv", "--dir=FWD_B", "--attr-post-ops=sum:0.5+prelu:per_oc", "mb2ic3ih5oc17oh5kh3ph1"],
], ids=["matmul", "ip", "conv", "conv_int8", "eltwise", "softmax", "pool", "binary",
        "matmul_prelu", "conv_prelu"])
def test_typed_operands_check_against_the_reference(argv, capsys):
    rc = main([argv[0], "--mode=C", *argv[1:]])
    out = capsys.readouterr().out
    assert rc == 0 and out.count("check,passed") == 1 and "FAILED" not in out, out
