"""kernels.reorder_source prints loopy's f32 reorder between plain layouts: the same name,
arguments and declared types, launch sizes, loopy's text byte for byte under the loopy version
recorded in ``test_codegen_unchanged`` (the listed forms and a seeded sweep of random ones) and,
on every loopy, bitwise the same results on every device present (Intel's CPU runtime and
PoCL): run-time and fixed forms, split and whole work-groups, partial groups, sequential dims
(extent-1 ones too), broadcast sources, accumulation. Conversions, scales, zero points, RNN
quantization and blocked layouts return None (loopy keeps them)."""
from __future__ import annotations

import functools
import pathlib
import random
import sys
from dataclasses import replace

import numpy as np
import pytest

from pydnnl.kernels.reorder import ReorderProblem, build_reorder, build_reorder_loopy, runtime_form
from pydnnl.kernels.reorder_source import reorder_source
from pydnnl.kernels.source import source_from_loopy
from pydnnl.memory.data_types import data_type

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from printed_kernels import declared_types, run_source, same_loopy_version  # noqa: E402

F32 = data_type.f32


def _lay(off: int, strides) -> tuple:
    return (off, tuple((1, s, ()) for s in strides))


def _problem(dims, ss, ds, so=0, do=0, beta=0.0, runtime=False) -> ReorderProblem:
    n = max(sum(s * (d - 1) for s, d in zip(st, dims)) + o + 1
            for st, o in ((ss, so), (ds, do)))
    p = ReorderProblem(dims=tuple(dims), src_dt=F32, dst_dt=F32, src_layout=_lay(so, ss),
                       dst_layout=_lay(do, ds), src_nelems=n, dst_nelems=n, beta=beta)
    return runtime_form(p) if runtime else p


# (problem, wg, run-time offsets and outer size)
CASES = [
    # the staging reorders of ResNet-50's backward data (weights OIhw -> a transposed layout)
    (_problem((3, 32, 2, 32), (2048, 1, 1024, 32), (1024, 32, 6144, 1), runtime=True), 32,
     (3, 5, 3)),
    (_problem((2, 512, 48), (24576, 48, 1), (48, 1024, 1), runtime=True), 32, (0, 7, 2)),
    (_problem((2, 40, 3, 5), (600, 15, 5, 1), (600, 1, 40, 120), runtime=True), 16, (2, 1, 2)),
    (_problem((4, 8, 3, 10), (240, 30, 10, 1), (240, 1, 8, 24), runtime=True), 32, (1, 4, 4)),
    (_problem((4, 8, 3, 10), (240, 30, 10, 1), (240, 1, 8, 24), so=5, do=7), 32, None),
    (_problem((4, 8, 3, 5, 7), (840, 105, 35, 7, 1), (1, 4, 32, 96, 480), so=3), 32, None),
    (_problem((100, 7), (8, 1), (7, 700), beta=1.0), 32, None),
    (_problem((37, 5, 2), (10, 2, 1), (1, 37, 185), do=2, beta=0.5), 16, None),
    (_problem((64, 3), (0, 1), (3, 1)), 32, None),  # broadcast source
    (_problem((6, 2, 45), (90, 45, 1), (2, 1, 12), beta=-2.0, runtime=True), 32, (4, 0, 6)),
    (_problem((16, 4), (4, 1), (1, 16)), 8, None),
    # extent-1 sequential dims (blocks declaring their index), MobileNet's depthwise weights
    (_problem((2, 32, 1, 32), (1024, 1, 1024, 32), (1024, 32, 2048, 1), runtime=True), 32,
     (1, 3, 2)),
    (_problem((4, 1, 3, 5, 7), (105, 105, 35, 7, 1), (1, 4, 4, 12, 60), beta=1.0), 32, None),
    (_problem((3, 4, 2, 1, 5, 1, 40), (1600, 400, 200, 200, 40, 40, 1),
              (1, 3, 12, 24, 24, 120, 120), so=5, do=7), 16, None),
    (_problem((2, 3, 1, 4, 1, 45), (1, 2, 6, 6, 24, 24), (540, 180, 180, 45, 45, 1)), 32,
     None),  # under the partial group's guard
]


@functools.lru_cache(maxsize=None)
def _pair(k: int):
    p, wg, _ = CASES[k]
    ours, theirs = reorder_source(p, {"wg": wg}), build_reorder_loopy(p, {"wg": wg})
    assert ours is not None
    assert build_reorder(p, {"wg": wg}) == ours
    return ours, source_from_loopy(theirs)


def _same_kernel(ours, theirs) -> None:
    for field in ("name", "arg_names", "global_size", "local_size", "grid", "build_options"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert declared_types(ours) == declared_types(theirs)
    if same_loopy_version():
        assert ours.source == theirs.source


@pytest.mark.parametrize("k", range(len(CASES)))
def test_reorder_equals_loopy(engine, k):
    ours, theirs = _pair(k)
    _same_kernel(ours, theirs)
    p, _, rt = CASES[k]
    values, n = {}, max(p.src_nelems, p.dst_nelems)
    if rt is not None:
        values = {"src_off": rt[0], "dst_off": rt[1], "d0": rt[2]}
        n = 64 + max(sum(s * (d - 1) for (_, s, _), d in zip(lay[1], (rt[2],) + p.dims[1:]))
                     for lay in (p.src_layout, p.dst_layout)) + 1
    rng = np.random.default_rng(k)
    bufs = {"src": rng.standard_normal(n).astype(np.float32),
            "dst": rng.standard_normal(n).astype(np.float32)}
    a = run_source(engine, ours, bufs, values)
    b = run_source(engine, theirs, bufs, values)
    np.testing.assert_array_equal(a["dst"], b["dst"])
    assert not np.array_equal(a["dst"], bufs["dst"])  # it wrote


def _random_problem(rng: random.Random):
    nd = rng.randint(1, 5)
    dims = tuple(rng.choice([1, 2, 3, 5, 8, 16, 31, 32, 33, 48]) for _ in range(nd))

    def strides():
        order, s, n = list(range(nd)), [0] * nd, 1
        rng.shuffle(order)
        for d in reversed(order):
            s[d] = n if rng.random() > 0.1 else 0
            n *= dims[d] + rng.choice([0, 0, 1])
        return s

    p = _problem(dims, strides(), strides(), so=rng.choice([0, 5]), do=rng.choice([0, 7]),
                 beta=rng.choice([0.0, 0.0, 1.0, 0.5]))
    if rng.random() < 0.5:
        p = runtime_form(p) or p
    return p, rng.choice([32, 16, 8])


def test_random_forms_equal_loopy():
    """Text and launch sizes over a seeded sweep of random covered forms."""
    rng, covered = random.Random(22), 0
    for _ in range(80):
        p, wg = _random_problem(rng)
        ours = reorder_source(p, {"wg": wg})
        if ours is not None:
            covered += 1
            _same_kernel(ours, source_from_loopy(build_reorder_loopy(p, {"wg": wg})))
    assert covered >= 25


def test_declines():
    p, wg, _ = CASES[4]
    assert reorder_source(p, {"wg": wg}) is not None
    for q in (replace(p, dst_dt=data_type.bf16), replace(p, src_dt=data_type.s8),
              replace(p, src_scale_mask=0), replace(p, dst_zp_mask=0),
              replace(p, beta=0.1),  # (not a float32: loopy's spelling unchecked)
              replace(p, src_layout=(5, ((1, 240, ()), (8, 30, ((8, 1, 1),)), (1, 10, ()),
                                         (1, 1, ())))),  # blocked
              _problem((1,), (1,), (1,))):
        assert reorder_source(q, {"wg": wg}) is None
    q = ReorderProblem(dims=(4, 8), src_dt=F32, dst_dt=data_type.u8, src_layout=_lay(0, (8, 1)),
                       dst_layout=_lay(0, (8, 1)), src_nelems=32, dst_nelems=32, rnn_data=True)
    assert reorder_source(q) is None
