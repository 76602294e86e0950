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
