"""Shared pieces of the normalization vector-form tests: memories, tolerances and the check
of a backward pass's outputs against the float64 reference's."""
from __future__ import annotations

import numpy as np

import pydnnl as dnnl

#: a unit in the last place of the low-precision kinds (bf16, f16)
UNIT = {"bf16": 2.0 ** -9, "f16": 2.0 ** -12}


def ln_data(dims, seed) -> dict:
    """Layer normalization operands over ``dims`` (C innermost): src away from zero mean,
    diff_dst, scale in [0.5, 1.5] and shift."""
    rng = np.random.default_rng(seed)
    C = dims[-1]
    return dict(x=(rng.standard_normal(dims) * 1.5 + 0.5).astype(np.float32),
                dy=rng.standard_normal(dims).astype(np.float32),
                scale=rng.uniform(0.5, 1.5, C).astype(np.float32),
                shift=rng.standard_normal(C).astype(np.float32))


def mem(md, eng, v=None):
    return dnnl.memory(md, eng, v) if v is not None else dnnl.memory(md, eng)


def close(got, want, tol=2e-5):
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


def check_backward(b: dict, kind: str, dx, dsc, dsh) -> None:
    """diff_src (and diff_scale / diff_shift where ``b`` has them) of a backward execution's
    arguments ``b`` against the reference's ``dx``, ``dsc``, ``dsh``; diff_src of a bf16/f16
    run within two units of its type plus a small absolute part."""
    got = b[dnnl.ARG_DIFF_SRC].to_numpy().astype(np.float64)
    if kind == "f32":
        close(got, dx)
    else:
        bound = 2 * UNIT[kind] * np.abs(dx) + 2e-5 * max(1.0, np.abs(dx).max())
        assert np.all(np.abs(got - dx) <= bound)
    if dnnl.ARG_DIFF_SCALE in b:
        close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), dsc, 1e-4)
    if dnnl.ARG_DIFF_SHIFT in b:
        close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), dsh, 1e-4)
