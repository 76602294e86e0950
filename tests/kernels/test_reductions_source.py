"""kernels.reductions_source prints loopy's untiled transpose and one-lane column sum: the same
name, arguments and declared types, launch sizes, loopy's text byte for byte under the loopy
version recorded in ``test_codegen_unchanged`` and, on every loopy, bitwise the same results
(the same rows summed in the same order). Both kernels run on the same random buffers
(outputs filled beforehand) with offsets, on every device present (Intel's CPU runtime and
PoCL): whole and partial work-groups, one work-group, accumulating or not, no rows at all.
Single columns and unit row strides return None (loopy keeps them)."""
from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import pytest

from pydnnl.kernels.reductions import (
    ColSum,
    Transpose,
    build_colsum,
    build_colsum_loopy,
    build_transpose,
    build_transpose_loopy,
)
from pydnnl.kernels.reductions_source import colsum_source, transpose_source

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from printed_kernels import (  # noqa: E402
    declared_types,
    printed_and_loopy,
    run_source,
    same_loopy_version,
)

TRANSPOSES = [Transpose(cols=2048, ld=2048), Transpose(cols=100, ld=130),
              Transpose(cols=16, ld=40), Transpose(cols=5, ld=7), Transpose(cols=48, ld=48, wg=32)]
COLSUMS = [ColSum(width=2048, ld=2048), ColSum(width=1536, ld=2048, accumulate=False),
           ColSum(width=20, ld=30, wg=16), ColSum(width=32, ld=64),
           ColSum(width=7, ld=9, accumulate=False)]


@functools.lru_cache(maxsize=None)
def _pair(kind: str, k: int):
    if kind == "transpose":
        p = TRANSPOSES[k]
        return p, *printed_and_loopy(p, transpose_source, build_transpose, build_transpose_loopy)
    p = COLSUMS[k]
    return p, *printed_and_loopy(p, colsum_source, build_colsum, build_colsum_loopy)


def _check(engine, kind: str, k: int, nrows: int) -> None:
    p, ours, theirs = _pair(kind, k)
    for field in ("name", "arg_names", "global_size", "local_size", "grid", "build_options"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert declared_types(ours) == declared_types(theirs)
    if same_loopy_version():
        assert ours.source == theirs.source
    cols = p.cols if kind == "transpose" else p.width
    rng = np.random.default_rng(k)
    bufs = {"src": rng.standard_normal(5 + nrows * p.ld + 3).astype(np.float32),
            "out": rng.standard_normal(7 + cols * max(nrows, 1) + 3).astype(np.float32)}
    values = {"o_off": 7, "i_off": 5, "nrows": nrows}
    if nrows == 0 and kind == "transpose":
        return  # (an empty grid: nothing to launch)
    a = run_source(engine, ours, bufs, values)
    b = run_source(engine, theirs, bufs, values)
    for name in bufs:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize("k", range(len(TRANSPOSES)))
def test_transpose_equals_loopy(engine, k):
    _check(engine, "transpose", k, 37)


@pytest.mark.parametrize("k, nrows", [(k, 37) for k in range(len(COLSUMS))] + [(2, 0), (1, 1)])
def test_colsum_equals_loopy(engine, k, nrows):
    _check(engine, "colsum", k, nrows)


def test_declines():
    assert transpose_source(Transpose(cols=1, ld=4)) is None
    assert transpose_source(Transpose(cols=8, ld=8, tile=8)) is None
    assert colsum_source(ColSum(width=1, ld=1)) is None
    assert colsum_source(ColSum(width=8, ld=8, row_lanes=4)) is None
