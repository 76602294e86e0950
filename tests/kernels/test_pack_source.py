"""kernels.pack_source's packer (every size at run time) writes what the baked packers write:
for each case, loopy's baked packer (``BPacking.build``) and the run-time packer run on the
same random buffers (the packed buffer filled beforehand, so what either leaves unwritten is
compared too), on every device present, and both equal numpy's packing (``BPacking.pack``):
B transposed or not, k below, at and past whole blocks of 16, ragged last panels, ``ldb``
past n, several matrices apart by a stride, offsets, panel widths 16, 32 and 48."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

from pydnnl.kernels.pack_source import ARG_NAMES, pack_b_runtime_source, runtime_args
from pydnnl.kernels.source import source_from_loopy

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from printed_kernels import packer_case, run_source  # noqa: E402

# (n, k, ldb, trans_b, count, stride_b, width)
_CASES = [(32, 3136, 256, False, 8, 32, 32),     # res2a's weight gradient into panels
          (64, 40, 64, False, 1, 0, 32), (100, 17, 130, False, 3, 140, 48),
          (70, 24, 30, True, 1, 0, 32), (48, 9, 12, True, 2, 48 * 12 + 5, 16),
          (1536, 48, 1536, False, 1, 0, 48),     # GRU 512's layer weights (k cut short)
          (512, 32, 1536, True, 1, 0, 48),       # a GRU backward's transposed weights
          (1024, 3, 1536, True, 2, 7, 32), (16, 1, 16, False, 1, 0, 16)]


def _rand(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("case", _CASES, ids=range(len(_CASES)))
def test_runtime_packer_equals_baked(engine, case):
    n, k, ldb, tb, count, stride, width = case
    pk, npan, span = packer_case(case)
    packed = npan * width * k
    b = _rand(4 + span + 3, 7)
    bufs = {"b": b, "bp": _rand(6 + count * packed + 3, 8)}
    ours = pack_b_runtime_source(tb)
    assert ours.arg_names == ARG_NAMES
    values = dict(runtime_args(k, n, ldb, width, count, stride, packed), b_off=4, bp_off=6)
    got = run_source(engine, ours, bufs, values)
    theirs = run_source(engine, source_from_loopy(pk.build()), bufs, {"b_off": 4, "bp_off": 6})
    for name in bufs:
        np.testing.assert_array_equal(got[name], theirs[name], err_msg=name)
    expect = pk.pack(b[4:])
    np.testing.assert_array_equal(got["bp"][6:6 + count * packed], expect.ravel())
    np.testing.assert_array_equal(got["bp"][:6], bufs["bp"][:6])  # nothing written outside
    np.testing.assert_array_equal(got["bp"][6 + count * packed:],
                                  bufs["bp"][6 + count * packed:])
