"""oneDNN's fpmath mode: the attribute, the process default and its environment variable."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import pydnnl as dnnl


def test_attribute_starts_with_the_default_and_overrides_it():
    assert dnnl.get_default_fpmath_mode() == dnnl.fpmath_mode.strict
    attr = dnnl.primitive_attr()
    assert attr.get_fpmath_mode() == dnnl.fpmath_mode.strict
    attr.set_fpmath_mode(dnnl.fpmath_mode.tf32, apply_to_int=True)
    assert attr.get_fpmath_mode() == dnnl.fpmath_mode.tf32 and attr.get_fpmath_apply_to_int()
    assert attr.key() != dnnl.primitive_attr().key()  # primitives cache per mode
    assert attr.is_default()  # a mode only permits: no primitive refuses it
    try:
        dnnl.set_default_fpmath_mode("tf32")
        assert dnnl.primitive_attr().get_fpmath_mode() == dnnl.fpmath_mode.tf32
    finally:
        dnnl.set_default_fpmath_mode(dnnl.fpmath_mode.strict)


@pytest.mark.parametrize("bad", ["fast", 7, None])
def test_bad_modes_name_the_choices(bad):
    with pytest.raises(dnnl.invalid_arguments, match="strict, bf16, f16, any, tf32"):
        dnnl.primitive_attr().set_fpmath_mode(bad)
    with pytest.raises(dnnl.invalid_arguments, match="set_default_fpmath_mode"):
        dnnl.set_default_fpmath_mode(bad)


def test_environment_variable_sets_the_default():
    code = "import pydnnl as d; print(d.get_default_fpmath_mode().name)"
    env = {**os.environ, "PYDNNL_DEFAULT_FPMATH_MODE": "TF32"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "tf32", r.stderr


def test_plans_take_the_mode_in_force():
    from pydnnl.runtime import fpmath
    from pydnnl.runtime.plan import Plan

    assert Plan(None, dry=True).math == "strict"
    with fpmath.scope(dnnl.fpmath_mode.any):
        assert Plan(None, dry=True).math == "tf32"


def test_bf16_and_f16_operands_take_their_tensor_cores_under_strict(cpu_engine):
    """bf16 (f16) operands multiply exactly on bf16 (f16) tensor cores: under the default
    strict mode a matmul or inner product whose operands are all of one such type builds its
    plans in that format's mode; mixed types, f32 and an explicit mode keep the attribute's."""
    MD, dt, F = dnnl.memory.desc, dnnl.memory.data_type, dnnl.fpmath_mode

    def mm(a, b, c, mode=None):
        attr = dnnl.primitive_attr()
        if mode is not None:
            attr.set_fpmath_mode(mode)
        return dnnl.matmul.primitive_desc(cpu_engine, MD([8, 16], a, "ab"),
                                          MD([16, 4], b, "ab"), MD([8, 4], c, "ab"),
                                          attr=attr)._fpmath_mode()

    assert mm(dt.bf16, dt.bf16, dt.f32) == F.bf16
    assert mm(dt.f16, dt.f16, dt.f16) == F.f16
    assert mm(dt.f32, dt.f32, dt.f32) == F.strict
    assert mm(dt.bf16, dt.f16, dt.f32) == F.strict
    assert mm(dt.bf16, dt.bf16, dt.bf16, F.tf32) == F.tf32

    def ip(d):
        return dnnl.inner_product_forward.primitive_desc(
            cpu_engine, dnnl.prop_kind.forward_inference, MD([4, 16], d, "ab"),
            MD([8, 16], d, "ab"), MD([4, 8], d, "ab"))._fpmath_mode()

    assert ip(dt.bf16) == F.bf16 and ip(dt.f32) == F.strict


def test_bf16_convolution_through_im2col_takes_bf16_tensor_cores(cpu_engine):
    """A bf16 convolution whose GEMM multiplies the values themselves (im2col) builds in bf16
    mode; a solver multiplying transforms of them (Winograd) keeps strict."""
    MD, dt, F = dnnl.memory.desc, dnnl.memory.data_type, dnnl.fpmath_mode

    def conv(d, solver, k):
        alg = dnnl.algorithm.convolution_winograd if solver.startswith("winograd") \
            else dnnl.algorithm.convolution_direct
        return dnnl.convolution_forward.primitive_desc(
            cpu_engine, dnnl.prop_kind.forward_training, alg,
            MD([2, 16, 8, 8], d, "any"), MD([8, 16, k, k], d, "any"),
            MD([2, 8, 8, 8], d, "any"), [1, 1], [k // 2] * 2, [k // 2] * 2,
            solver=solver)._fpmath_mode()

    assert conv(dt.bf16, "im2col_gemm", 1) == F.bf16
    assert conv(dt.f32, "im2col_gemm", 1) == F.strict
    assert conv(dt.bf16, "winograd_f2x3", 3) == F.strict
