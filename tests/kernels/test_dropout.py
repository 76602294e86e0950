"""Dropout kernels against the numpy Philox reference on every device: the mask bit for bit,
y and dx bit for bit, strided views with gaps left untouched, odd sizes, in-place use, a bound
launch with placeholders as plans use it, validation before any write; then the kernels under
the Oclgrind simulator."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pyopencl as cl
import pytest

import pydnnl as dnnl
from pydnnl.error import invalid_arguments
from pydnnl.reference.philox import dropout_keep, dropout_scale, dropout_words
from pydnnl.runtime.dropout import get_dropout, get_dropout_bwd

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from oclgrind_helpers import has_oclgrind, run_probe  # noqa: E402

SENTINEL = np.float32(-12345.5)


def _buf(eng, host: np.ndarray):
    mf = cl.mem_flags
    return cl.Buffer(eng.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=host)


def _read(stream, buf, like: np.ndarray) -> np.ndarray:
    out = np.empty_like(like)
    cl.enqueue_copy(stream.queue, out, buf, is_blocking=True)
    return out


def _view(flat, off, rows, cols, ld):
    return np.lib.stride_tricks.as_strided(flat[off:], shape=(rows, cols),
                                           strides=(ld * flat.itemsize, flat.itemsize))


def _expected_y(x_host, y_host, keep, scale, rows, cols, x_off, ld_x, y_off, ld_y):
    """The whole y buffer after dropout, gaps kept: ``x * scale`` (float32) where kept."""
    y = y_host.copy()
    xv = _view(x_host, x_off, rows, cols, ld_x)
    k = keep.reshape(rows, cols)
    _view(y, y_off, rows, cols, ld_y)[...] = np.where(k, xv * scale, np.float32(0))
    return y


def run_forward(engine, stream, rows, cols, ld_x, ld_y, seed, offset, p, x_off=3, y_off=2,
                m_off=5):
    rng = np.random.default_rng(rows * 131 + cols)
    x = rng.standard_normal(x_off + (rows - 1) * ld_x + cols + 4).astype(np.float32)
    y = np.full(y_off + (rows - 1) * ld_y + cols + 4, SENTINEL, np.float32)
    m = np.full(m_off + rows * cols + 4, 0xAB, np.uint8)
    xb, yb, mb = _buf(engine, x), _buf(engine, y), _buf(engine, m)
    get_dropout(engine, rows, cols, ld_x, ld_y)(stream, xb, x_off, yb, y_off, mb, m_off, seed,
                                                offset, p)
    y_dev, m_dev = _read(stream, yb, y), _read(stream, mb, m)
    keep = dropout_keep(seed, offset, rows * cols, p)
    m_exp = m.copy()
    m_exp[m_off:m_off + rows * cols] = keep
    y_exp = _expected_y(x, y, keep, dropout_scale(p), rows, cols, x_off, ld_x, y_off, ld_y)
    return y_dev, y_exp, m_dev, m_exp


VIEWS = [  # rows, cols, ld_x, ld_y
    (1, 1, 1, 1), (1, 7, 7, 7), (1, 4097, 4097, 4097),
    (5, 7, 9, 11),  # groups of four straddle rows; both views strided
    (3, 6, 6, 8), (7, 1, 3, 2),
    (4, 8, 8, 12), (3, 16, 21, 17),  # multiples of 4 columns take the kernel's short path
]


@pytest.mark.parametrize("rows,cols,ld_x,ld_y", VIEWS)
@pytest.mark.parametrize("p", [0.0, 0.3, 0.9])
def test_forward_matches_reference(engine, stream, rows, cols, ld_x, ld_y, p):
    y_dev, y_exp, m_dev, m_exp = run_forward(engine, stream, rows, cols, ld_x, ld_y,
                                             seed=2**40 + 77, offset=2**33 + 5, p=p)
    assert np.array_equal(m_dev, m_exp)
    assert np.array_equal(y_dev.view(np.uint32), y_exp.view(np.uint32))


@pytest.mark.parametrize("seed,offset", [(0, 0), (1, 0), (0, 1), (2**64 - 1, 2**64 - 1),
                                         (0xFFFFFFFF, 2**32)])
def test_forward_seeds_and_offsets(engine, stream, seed, offset):
    y_dev, y_exp, m_dev, m_exp = run_forward(engine, stream, 3, 5, 5, 6, seed, offset, 0.5)
    assert np.array_equal(m_dev, m_exp)
    assert np.array_equal(y_dev.view(np.uint32), y_exp.view(np.uint32))


def test_forward_large_mask_and_rate(engine, stream):
    """10^5 elements through a strided view: bit-exact, and the device drop rate is the
    reference's (so within its tested 4-sigma band)."""
    rows, cols, p = 256, 400, 0.25
    y_dev, y_exp, m_dev, m_exp = run_forward(engine, stream, rows, cols, 409, 403, 31337, 8, p)
    assert np.array_equal(m_dev, m_exp)
    assert np.array_equal(y_dev.view(np.uint32), y_exp.view(np.uint32))
    n = rows * cols
    dropped = n - int(m_dev[5:5 + n].sum())
    assert abs(dropped - n * p) <= 4 * np.sqrt(n * p * (1 - p))


def test_forward_same_seed_same_other_seed_differs(engine, stream):
    _, _, a, _ = run_forward(engine, stream, 4, 64, 64, 64, 5, 0, 0.5)
    _, _, b, _ = run_forward(engine, stream, 4, 64, 64, 64, 5, 0, 0.5)
    _, _, c, _ = run_forward(engine, stream, 4, 64, 64, 64, 6, 0, 0.5)
    _, _, d, _ = run_forward(engine, stream, 4, 64, 64, 64, 5, 1, 0.5)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c) and not np.array_equal(a, d)


@pytest.mark.parametrize("rows,cols", [(1, 8), (2, 7)])
def test_forward_threshold_on_a_word(engine, stream, rows, cols):
    """p placed so that the threshold equals an element's word keeps that element (kept iff
    word >= threshold); one step higher drops it."""
    seed, offset = 77, 1
    words = dropout_words(seed, offset, rows * cols)
    for e in (0, 3, rows * cols - 1):
        w = int(words[e])
        for t, kept in ((w, True), (w + 1, False)):
            if not 0 < t < 2**32:
                continue
            p = t / 2**32
            _, _, m_dev, m_exp = run_forward(engine, stream, rows, cols, cols, cols, seed, offset,
                                             p)
            assert bool(m_exp[5 + e]) is kept
            assert np.array_equal(m_dev, m_exp), (e, t)


def test_forward_in_place(engine, stream):
    rows, cols, ld, off, seed, p = 3, 10, 12, 4, 99, 0.4
    x = np.random.default_rng(5).standard_normal(off + (rows - 1) * ld + cols).astype(np.float32)
    xb, mb = _buf(engine, x), _buf(engine, np.zeros(rows * cols, np.uint8))
    get_dropout(engine, rows, cols, ld, ld)(stream, xb, off, xb, off, mb, 0, seed, 0, p)
    keep = dropout_keep(seed, 0, rows * cols, p)
    exp = _expected_y(x, x, keep, dropout_scale(p), rows, cols, off, ld, off, ld)
    assert np.array_equal(_read(stream, xb, x).view(np.uint32), exp.view(np.uint32))


@pytest.mark.parametrize("rows,cols,ld_dy,ld_dx", VIEWS)
def test_backward_reads_stored_mask(engine, stream, rows, cols, ld_dy, ld_dx):
    """dx from a mask that no generator produced, so the kernel must read it."""
    rng = np.random.default_rng(rows + 7 * cols)
    dy_off, dx_off, m_off, p = 1, 6, 3, 0.3
    dy = rng.standard_normal(dy_off + (rows - 1) * ld_dy + cols + 2).astype(np.float32)
    dx = np.full(dx_off + (rows - 1) * ld_dx + cols + 2, SENTINEL, np.float32)
    m = rng.integers(0, 2, m_off + rows * cols).astype(np.uint8)
    m[m_off:] *= rng.integers(1, 256, rows * cols).astype(np.uint8)  # nonzero means kept
    dyb, dxb, mb = _buf(engine, dy), _buf(engine, dx), _buf(engine, m)
    get_dropout_bwd(engine, rows, cols, ld_dy, ld_dx)(stream, dyb, dy_off, dxb, dx_off, mb,
                                                      m_off, p)
    keep = m[m_off:] != 0
    exp = _expected_y(dy, dx, keep, dropout_scale(p), rows, cols, dy_off, ld_dy, dx_off, ld_dx)
    assert np.array_equal(_read(stream, dxb, dx).view(np.uint32), exp.view(np.uint32))


def test_forward_then_backward(engine, stream):
    """The mask the forward kernel stores drives the backward kernel: dx is dy times the
    slope of y in x."""
    rows, cols, ld, seed, p = 6, 9, 9, 2024, 0.5
    rng = np.random.default_rng(11)
    x = rng.standard_normal(rows * ld).astype(np.float32)
    dy = rng.standard_normal(rows * ld).astype(np.float32)
    xb, yb = _buf(engine, x), _buf(engine, np.zeros_like(x))
    mb = _buf(engine, np.zeros(rows * cols, np.uint8))
    dyb, dxb = _buf(engine, dy), _buf(engine, np.zeros_like(dy))
    get_dropout(engine, rows, cols)(stream, xb, 0, yb, 0, mb, 0, seed, 3, p)
    get_dropout_bwd(engine, rows, cols)(stream, dyb, 0, dxb, 0, mb, 0, p)
    y, dx = _read(stream, yb, x), _read(stream, dxb, dy)
    keep = dropout_keep(seed, 3, rows * cols, p)
    # y is linear in x with slope scale (kept) or 0 (dropped): dx = dy * slope
    assert np.array_equal(dx, np.where(keep, dy * np.float32(2), np.float32(0)))
    assert np.array_equal(y, np.where(keep, x * np.float32(2), np.float32(0)))


class _Placeholder:
    def __init__(self, key):
        self.key = key


def test_bound_launch_with_placeholders(engine, stream):
    """How a plan uses the launcher: bind once with buffer placeholders, launch with buffers."""
    rows, cols, seed, p = 2, 9, 17, 0.3
    x = np.random.default_rng(3).standard_normal(rows * cols).astype(np.float32)
    xb, yb = _buf(engine, x), _buf(engine, np.zeros_like(x))
    mb = _buf(engine, np.zeros(rows * cols, np.uint8))
    fwd = get_dropout(engine, rows, cols)
    bound = fwd.kernel.bound(fwd.ordered(_Placeholder("src"), 0, _Placeholder("dst"), 0,
                                         _Placeholder("ws"), 0, seed, 0, p))
    bound.launch(stream, {"src": xb, "dst": yb, "ws": mb})
    keep = dropout_keep(seed, 0, rows * cols, p)
    assert np.array_equal(_read(stream, mb, np.zeros(rows * cols, np.uint8)), keep)
    assert np.array_equal(_read(stream, yb, x), np.where(keep, x * dropout_scale(p), 0))


def test_pydnnl_memory_arguments(engine, stream):
    md = dnnl.memory.desc([4, 8], dnnl.memory.data_type.f32, dnnl.memory.format_tag.ab)
    mmd = dnnl.memory.desc([32], dnnl.memory.data_type.u8, dnnl.memory.format_tag.a)
    x = np.random.default_rng(4).standard_normal((4, 8)).astype(np.float32)
    src, dst, mask = dnnl.memory(md, engine, x), dnnl.memory(md, engine), dnnl.memory(mmd, engine)
    get_dropout(engine, 4, 8)(stream, src, 0, dst, 0, mask, 0, 1, 2, 0.6)
    stream.wait()
    keep = dropout_keep(1, 2, 32, 0.6)
    assert np.array_equal(mask.to_numpy(), keep.astype(np.uint8))
    assert np.array_equal(dst.to_numpy(), np.where(keep.reshape(4, 8), x * dropout_scale(0.6), 0))


def test_validation_before_any_write(engine, stream):
    rows, cols = 2, 4
    x = np.ones(rows * cols, np.float32)
    y = np.full(rows * cols, SENTINEL, np.float32)
    xb, yb = _buf(engine, x), _buf(engine, y)
    mb = _buf(engine, np.full(rows * cols, 7, np.uint8))
    fwd, bwd = get_dropout(engine, rows, cols), get_dropout_bwd(engine, rows, cols)
    bad = [
        (dict(p=1.0), r"\bp\b"), (dict(p=-0.5), r"\bp\b"), (dict(p=float("nan")), r"\bp\b"),
        (dict(seed=-1), "seed"), (dict(seed=2**64), "seed"), (dict(offset=-2), "offset"),
        (dict(x_off=1), "x_off"), (dict(y_off=-1), "y_off"), (dict(m_off=1), "m_off"),
    ]
    for kw, msg in bad:
        args = dict(x=xb, x_off=0, y=yb, y_off=0, mask=mb, m_off=0, seed=1, offset=0, p=0.5)
        args.update(kw)
        with pytest.raises(invalid_arguments, match=msg):
            fwd(stream, **args)
    for kw, msg in [(dict(p=1.0), r"\bp\b"), (dict(dx_off=2), "dx_off"),
                    (dict(dy_off=1), "dy_off")]:
        args = dict(dy=xb, dy_off=0, dx=yb, dx_off=0, mask=mb, m_off=0, p=0.5)
        args.update(kw)
        with pytest.raises(invalid_arguments, match=msg):
            bwd(stream, **args)
    stream.wait()
    assert np.array_equal(_read(stream, yb, y).view(np.uint32), y.view(np.uint32))
    assert (_read(stream, mb, np.zeros(rows * cols, np.uint8)) == 7).all()


@pytest.mark.parametrize("kw,msg", [(dict(rows=0), "rows"), (dict(cols=0), "cols"),
                                    (dict(ld_x=3), "ld_x"), (dict(ld_y=2), "ld_y"),
                                    (dict(rows=1.5), "rows")])
def test_bad_views(engine, kw, msg):
    args = dict(rows=2, cols=4, ld_x=None, ld_y=None)
    args.update(kw)
    with pytest.raises(invalid_arguments, match=msg):
        get_dropout(engine, **args)
    bargs = dict(rows=args["rows"], cols=args["cols"], ld_dy=args["ld_x"], ld_dx=args["ld_y"])
    with pytest.raises(invalid_arguments, match=msg.replace("ld_x", "ld_dy")
                       .replace("ld_y", "ld_dx")):
        get_dropout_bwd(engine, **bargs)


# {{{ Oclgrind

PROBE = r"""
import json
import numpy as np
import pyopencl as cl
import pydnnl as dnnl
from pydnnl.runtime.dropout import get_dropout, get_dropout_bwd
from pydnnl.reference.philox import dropout_keep, dropout_scale

eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
mf = cl.mem_flags
rng = np.random.default_rng(0)
results = {}

def buf(host):
    # written by the host (see the reorder Oclgrind test on fill buffers and shadow state)
    return cl.Buffer(eng.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=host)

def read(b, like):
    out = np.empty_like(like)
    cl.enqueue_copy(s.queue, out, b, is_blocking=True)
    return out

def view(flat, off, rows, cols, ld):
    return np.lib.stride_tricks.as_strided(flat[off:], shape=(rows, cols),
                                           strides=(ld * flat.itemsize, flat.itemsize))

for name, (rows, cols, ld_x, ld_y) in {"one": (1, 1, 1, 1), "odd": (1, 7, 7, 7),
                                       "strided": (3, 5, 7, 6), "cols4": (2, 8, 9, 8)}.items():
    seed, offset, p = 2**35 + 3, 2**32 + 1, 0.4
    x = rng.standard_normal(1 + (rows - 1) * ld_x + cols).astype(np.float32)
    y = np.full(2 + (rows - 1) * ld_y + cols, -1, np.float32)
    m = np.full(rows * cols + 3, 9, np.uint8)
    xb, yb, mb = buf(x), buf(y), buf(m)
    get_dropout(eng, rows, cols, ld_x, ld_y)(s, xb, 1, yb, 2, mb, 3, seed, offset, p)
    keep = dropout_keep(seed, offset, rows * cols, p)
    y_exp, m_exp = y.copy(), m.copy()
    view(y_exp, 2, rows, cols, ld_y)[...] = np.where(
        keep.reshape(rows, cols), view(x, 1, rows, cols, ld_x) * dropout_scale(p), 0)
    m_exp[3:] = keep
    ok = np.array_equal(read(mb, m), m_exp) and np.array_equal(read(yb, y), y_exp)
    # backward from the stored mask, into a strided dx
    dx = np.full(4 + (rows - 1) * ld_y + cols, -1, np.float32)
    dxb = buf(dx)
    get_dropout_bwd(eng, rows, cols, ld_x, ld_y)(s, xb, 1, dxb, 4, mb, 3, p)
    dx_exp = dx.copy()
    view(dx_exp, 4, rows, cols, ld_y)[...] = np.where(
        keep.reshape(rows, cols), view(x, 1, rows, cols, ld_x) * dropout_scale(p), 0)
    results[name] = bool(ok and np.array_equal(read(dxb, dx), dx_exp))
print(json.dumps(results))
"""

@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind simulator is not installed")
def test_dropout_kernels_clean_under_oclgrind():
    results = run_probe(PROBE)
    assert results == {"one": True, "odd": True, "strided": True, "cols4": True}

# }}}
