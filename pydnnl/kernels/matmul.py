"""GEMMs as primitives' plans use them: fixed sizes, run-time buffer offsets.

``get_gemm(engine, shape)`` returns a launcher ``g(stream, a, a_off, b, b_off, c, c_off)``
computing, row-major, ``C[m, n] = alpha * op(A)[m, k] @ op(B)[k, n] + beta * C`` where the
offsets (in elements) change per call: one kernel serves every time step, layer and direction.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .compiler import get_kernel


@dataclass(frozen=True)
class GemmShape:
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    trans_a: bool = False
    trans_b: bool = False
    alpha: float = 1.0
    beta: float = 0.0


def build_simple_gemm(s: GemmShape, params: dict | None = None):
    """A straightforward loopy GEMM: one C element per work-item, 16x16 work-groups."""
    import loopy as lp
    from pymbolic import var
    from loopy.symbolic import Reduction

    i, j, kk = var("i"), var("j"), var("kk")
    a_idx = var("a_off") + (kk * s.lda + i if s.trans_a else i * s.lda + kk)
    b_idx = var("b_off") + (j * s.ldb + kk if s.trans_b else kk * s.ldb + j)
    c_idx = var("c_off") + i * s.ldc + j
    prod = Reduction("sum", ("kk",), var("a")[a_idx] * var("b")[b_idx])
    rhs = prod if s.alpha == 1.0 else np.float32(s.alpha) * prod
    if s.beta != 0.0:
        rhs = rhs + np.float32(s.beta) * var("c")[c_idx]
    insn = lp.Assignment(var("c")[c_idx], rhs, within_inames=frozenset(["i", "j"]))
    knl = lp.make_kernel(
        f"{{[i, j, kk]: 0 <= i < {s.m} and 0 <= j < {s.n} and 0 <= kk < {s.k}}}", [insn],
        [lp.GlobalArg("a", np.float32, shape=None), lp.GlobalArg("b", np.float32, shape=None),
         lp.GlobalArg("c", np.float32, shape=None, is_output=True, is_input=s.beta != 0.0),
         lp.ValueArg("a_off", np.int32), lp.ValueArg("b_off", np.int32),
         lp.ValueArg("c_off", np.int32)],
        name="pydnnl_gemm_simple", lang_version=(2018, 2), target=lp.PyOpenCLTarget())
    bj = min(16, s.n)
    bi = min(16, s.m)
    knl = lp.split_iname(knl, "j", bj, inner_tag="l.0", outer_tag="g.0")
    knl = lp.split_iname(knl, "i", bi, inner_tag="l.1", outer_tag="g.1")
    return knl


class Gemm:
    """Launcher of one GEMM kernel with run-time offsets."""

    def __init__(self, engine, shape: GemmShape):
        self.shape = shape
        self.kernel = get_kernel(engine, "gemm_simple", shape, lambda: build_simple_gemm(shape))

    def __call__(self, stream, a, a_off, b, b_off, c, c_off, wait_for=None):
        vals = {"a": a, "b": b, "c": c, "a_off": np.int32(a_off), "b_off": np.int32(b_off),
                "c_off": np.int32(c_off)}
        args = [vals[n] for n in self.kernel.src.arg_names]
        return self.kernel(stream, *args, wait_for=wait_for)

    def flops(self) -> int:
        return 2 * self.shape.m * self.shape.n * self.shape.k


def get_gemm(engine, shape: GemmShape) -> Gemm:
    return Gemm(engine, shape)
