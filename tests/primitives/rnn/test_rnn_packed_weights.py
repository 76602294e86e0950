"""Inference weights left to the primitive (``format_tag.any``) resolve to the GEMM's panels
(``ldgOi<w>o``, :func:`pydnnl.primitives.rnn.plan_forward.weights_panel`) where the tuned
GEMMs read B in such panels: the user reorders into them once and no execution packs them
again. Outputs against the float64 reference; plain user weights and training keep working
as before."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from rnn_ext_helpers import _ARG, CELLS, Problem, _head, _md, assert_close  # noqa: E402

import pydnnl as dnnl  # noqa: E402
from pydnnl.primitives.rnn import plan_forward  # noqa: E402
from pydnnl.runtime.gemm import GemmShape, get_gemm, reads_panels  # noqa: E402

INFER = dnnl.prop_kind.forward_inference
TRAIN = dnnl.prop_kind.forward_training
F32 = dnnl.memory.data_type.f32
TAG = dnnl.memory.format_tag
WEIGHTS = ("weights_layer", "weights_iter")


@pytest.fixture
def per_step(monkeypatch):
    """Steps launched one by one: small problems would take a one-launch recurrence."""
    monkeypatch.setattr(plan_forward, "persistent_recurrence", lambda engine, s, training: False)
    monkeypatch.setattr(plan_forward, "grid_problem", lambda engine, s, training: None)


def _panel_width(engine) -> int:
    """Columns of the panels the tuned GEMM reads (one vector)."""
    w = 16 if engine.info.simd_width >= 16 else 8
    if not reads_panels(engine, GemmShape(m=64, n=4 * 32, k=32, lda=32, ldb=128, ldc=128), w):
        pytest.skip("this device's tuned GEMM reads no weights panels")
    return w


def _weights_width(engine, dhc: int) -> int | None:
    """Columns of the panels ``any`` weights of ``dhc`` channels a gate resolve to: one
    vector, or on 8-wide CPUs 16 where the gates allow (``heuristics.rnn.weights_panel``:
    a 6x16 tile there); None where a gate is no whole number of panels."""
    w = _panel_width(engine)
    if w == 8 and dhc % 16 == 0:
        return 16
    return w if dhc % w == 0 else None


def _reference(p, a) -> dict:
    y, h, c, _ = p.reference(a)
    return {"dst_layer": y, "dst_iter": h, "dst_iter_c": c}


def _run(engine, stream, p: Problem, a: dict, prop, weights_tag=TAG.any, executions=2):
    """The forward with weights described by ``weights_tag`` (any: the pd's choice), the user's
    ldigo weights reordered into that layout once. Returns (outputs, pd, primitive)."""
    dims = p.dims()
    descs = {n + "_desc": _md(d, n) for n, d in dims.items()}
    for n in WEIGHTS:
        descs[n + "_desc"] = dnnl.memory.desc(list(dims[n]), F32, weights_tag)
    cls = getattr(dnnl, CELLS[p.cell][0])
    pd = cls.primitive_desc(*_head(engine, p, prop), **descs)
    args, mems = {}, {}
    for name, d in dims.items():
        user = dnnl.memory(_md(d, name), engine)
        if name in a:
            user.write(np.ascontiguousarray(a[name], np.float32))
        m = user
        if name in WEIGHTS:
            m = dnnl.memory(getattr(pd, name + "_desc")(), engine)
            dnnl.reorder(user, m).execute(stream, user, m)
        mems[name] = m
        args[_ARG[name]] = m
    if prop == TRAIN:
        args[dnnl.ARG_WORKSPACE] = dnnl.memory(pd.workspace_desc(), engine)
    prim = cls(pd)
    for _ in range(executions):
        prim.execute(stream, args)
    stream.wait()
    out = {n: mems[n].to_numpy() for n in ("dst_layer", "dst_iter", "dst_iter_c") if n in mems}
    return out, pd, prim


def _packs(prim) -> int:
    return sum(1 for st in prim._plan.plan.steps if getattr(st, "name", "") == "pack_b")


CASES = {
    "lstm": Problem("lstm", 5, 9, 32, 32),
    "lstm_slc48": Problem("lstm", 4, 7, 48, 16),
    "gru_L2": Problem("gru", 4, 6, 32, 32, L=2),
    "lbr_gru": Problem("lbr_gru", 5, 8, 16, 32),
    "rnn_bi_concat": Problem("rnn", 4, 5, 32, 48, direction="bidirectional_concat"),
    "lstm_r2l_bi_sum": Problem("lstm", 4, 3, 16, 16, L=2, direction="bidirectional_sum"),
    # gates of 24 channels (8-wide CPUs: 8-column panels read two at a time by the 6x16
    # tile), k not a multiple of the tile's k unrolling (13 and 24 by 4), 7 rows (6-row tiles)
    "lstm_dhc24_slc13": Problem("lstm", 4, 7, 13, 24),
}


@pytest.mark.parametrize("name", list(CASES))
def test_any_weights_resolve_to_gemm_panels(engine, stream, per_step, name):
    """Inference ``any`` weights are ``ldgOi<w>o`` where the GEMMs read such panels (the
    recurrent and the layer weights in panels of one vector, read by one GEMM program); the
    plan packs only the others per execution and the
    outputs match the reference (each gate a whole number of panels, GRU's stages reading
    their gates' panels, layers and directions their matrices)."""
    p = CASES[name]
    w = _weights_width(engine, p.DHC)
    a = p.arrays(3)
    out, pd, prim = _run(engine, stream, p, a, INFER)
    dims = p.dims()
    panels = {n[:-5]: v[0] for n, v in pd._weights_panels.items()}
    assert panels.get("weights_iter") == w
    if w == 16:  # one GEMM program for both roles (first-ever creation)
        assert panels.get("weights_layer") == (16 if p.DHC % 16 == 0 else None)
    if _panel_width(engine) == 8:  # both roles read them with the same 6x16 tile
        assert panels.get("weights_layer") == w
    for n in WEIGHTS:
        want = dnnl.memory.desc(list(dims[n]), F32,
                                f"abdEc{panels[n]}e" if n in panels else TAG.ldigo)
        assert getattr(pd, n + "_desc")() == want, n
    assert _packs(prim) == len(WEIGHTS) - len(panels)  # one launch per weights tensor
    ref = _reference(p, a)
    for k, got in out.items():
        assert_close(got, ref[k], f"{name} {k}")


@pytest.mark.parametrize("name", ["lstm", "gru_L2"])
def test_plain_weights_still_packed_per_execution(engine, stream, per_step, name):
    """User weights in ldigo (not any) keep working: packed into the scratchpad at every
    execution, same results."""
    _panel_width(engine)
    p = CASES[name]
    a = p.arrays(4)
    out, pd, prim = _run(engine, stream, p, a, INFER, weights_tag=TAG.ldigo)
    assert pd.weights_layer_desc() == dnnl.memory.desc(list(p.dims()["weights_layer"]), F32,
                                                       TAG.ldigo)
    assert _packs(prim) >= len(WEIGHTS)
    ref = _reference(p, a)
    for k, got in out.items():
        assert_close(got, ref[k], f"{name} plain {k}")


def test_panel_weights_given_explicitly(engine, stream, per_step):
    """Weights described as ``ldgOi<w>o`` by the user (not any) are read in place too."""
    p = CASES["lstm"]
    w = _weights_width(engine, p.DHC)
    a = p.arrays(5)
    out, pd, prim = _run(engine, stream, p, a, INFER, weights_tag=f"abdEc{w}e")
    assert pd.weights_iter_desc() == dnnl.memory.desc(list(p.dims()["weights_iter"]), F32,
                                                      f"abdEc{w}e")
    # layer weights in panels other than the layer GEMM's: reordered to ldigo, then packed
    layer_panels = pd._weights_panels.get("weights_layer_desc", (None,))[0]
    assert _packs(prim) == (0 if layer_panels == w else 1)
    ref = _reference(p, a)
    for k, got in out.items():
        assert_close(got, ref[k], f"explicit {k}")


def test_panel_weights_reorder_back(engine, stream, per_step):
    """The chosen layout is a real memory desc: reordering out of it gives the user's weights
    back, and its panels hold the values at the places ``ldgOi<w>o`` names."""
    p = CASES["lstm"]
    w = _weights_width(engine, p.DHC)
    L, D, I, G, O = p.dims()["weights_iter"]
    x = np.random.default_rng(0).uniform(-1, 1, (L, D, I, G, O)).astype(np.float32)
    pd = _run(engine, stream, p, p.arrays(6), INFER, executions=1)[1]
    user = dnnl.memory(dnnl.memory.desc([L, D, I, G, O], F32, TAG.ldigo), engine)
    user.write(x)
    packed = dnnl.memory(pd.weights_iter_desc(), engine)
    dnnl.reorder(user, packed).execute(stream, user, packed)
    back = dnnl.memory(dnnl.memory.desc([L, D, I, G, O], F32, TAG.ldigo), engine)
    dnnl.reorder(packed, back).execute(stream, packed, back)
    stream.wait()
    np.testing.assert_array_equal(back.to_numpy(), x)
    # panel p of gate g: I rows of w channels, as B packed in w-column panels over G * O
    flat = packed.read_raw().view(np.float32).reshape(-1)[:x.size]
    want = x.reshape(L, D, I, G, O // w, w).transpose(0, 1, 3, 4, 2, 5).reshape(-1)
    np.testing.assert_array_equal(flat, want)


def test_training_keeps_plain_weights(engine, stream, per_step):
    """Training (and so backward) resolves any to ldigo, as oneDNN does."""
    p = CASES["lstm"]
    a = p.arrays(7)
    out, pd, _ = _run(engine, stream, p, a, TRAIN, executions=1)
    assert pd.weights_layer_desc() == dnnl.memory.desc(list(p.dims()["weights_layer"]), F32,
                                                       TAG.ldigo)
    ref = _reference(p, a)
    for k, got in out.items():
        assert_close(got, ref[k], f"training {k}")


@pytest.mark.parametrize("m,n,k", [(64, 2048, 512), (9, 80, 33), (70, 112, 16)])
def test_gemm_reads_narrower_panels(engine, stream, m, n, k):
    """The register-tile GEMM reading B in panels narrower than its tile (``b_panel``): the
    tile's vectors come from consecutive panels, a last tile past n reads the last panel again
    (n = 2048 or 80 in 48-wide tiles) and stores nothing past n."""
    w = _panel_width(engine)
    shape = GemmShape(m=m, n=n, k=k, lda=k, ldb=n, ldc=n)
    if not reads_panels(engine, shape, w):
        pytest.skip(f"the tuned kernel of {m}x{n}x{k} reads no {w}-column panels")
    _check_panel_gemm(engine, stream, get_gemm(engine, shape, b_panel=w), m, n, k, w, seed=1)


def _check_panel_gemm(engine, stream, g, m, n, k, w, seed):
    """Run ``g`` on random A and B packed in ``w``-column panels; compare with float64."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    bp = b.reshape(k, n // w, w).transpose(1, 0, 2).reshape(-1)
    md = lambda size: dnnl.memory.desc([size], F32, TAG.a)  # noqa: E731
    A, B = dnnl.memory(md(a.size), engine), dnnl.memory(md(bp.size), engine)
    C = dnnl.memory(md(m * n), engine)
    A.write(a.reshape(-1))
    B.write(bp)
    g(stream, A.buffer, 0, B.buffer, 0, C.buffer, 0)
    stream.wait()
    got = C.to_numpy().reshape(m, n)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pw", [8, 16])
@pytest.mark.parametrize("m,n,k", [(64, 2048, 512), (7, 96, 13), (200, 1024, 28), (13, 48, 6)])
def test_gemm_8wide_panel_tile(engine, stream, pw, m, n, k):
    """The tile 8-wide CPUs read inference weights with (``heuristics.rnn.weights_panel``:
    6x16, k unrolled by 4) over 16- and 8-column panels: rows that are no multiple of 6, k no
    multiple of 4."""
    from pydnnl.kernels.gemm import DEFAULT_CPU_PARAMS
    from pydnnl.runtime.heuristics import rnn as rnn_rules

    if not engine.info.is_cpu:
        pytest.skip("a CPU register tile")
    tile = dict(DEFAULT_CPU_PARAMS, vec=8, packed_b=True, **rnn_rules.PANEL_8WIDE_TILE)
    shape = GemmShape(m=m, n=n, k=k, lda=k, ldb=n, ldc=n)
    g = get_gemm(engine, shape, static_b=True, b_panel=pw, params=tile)
    _check_panel_gemm(engine, stream, g, m, n, k, pw, seed=2)


@pytest.mark.parametrize("tile", [0, 1])
@pytest.mark.parametrize("narrow", [False, True])
@pytest.mark.parametrize("m,n,k,ldc", [(3200, 2048, 512, 2048), (64, 2048, 512, 2048),
                                       (100, 1536, 512, 1536), (700, 2048, 512, 4096),
                                       (10, 80, 30, 80)])
def test_gemm_template_writes_the_panel_kernels(tile, narrow, m, n, k, ldc):
    """The hand-written template (no loopy at a first creation) writes the kernels these
    weights take, byte for byte as loopy generates them: the 8x48 tile over 16-column panels
    (the recurrent weights; clamped last panel where n is no multiple of 48) and the 8x32 tile
    unrolled by 4 over its own 32-column panels (the layer weights)."""
    from dataclasses import replace

    from pydnnl.kernels import gemm as G
    from pydnnl.kernels import gemm_template as T
    from pydnnl.kernels.source import source_from_loopy

    params = dict(T.TILES[tile])
    pw = 16 if narrow else params["cols"]
    pr = G.GemmProblem(m=m, n=n, k=k, lda=k, ldb=pw, ldc=ldc, b_layout=f"panel{pw}",
                       dtype=np.float32, acc_dtype=np.float32, runtime_offsets=True,
                       runtime_m="tall", runtime_k=True)
    src = T.register_source(pr, params)
    assert src is not None
    assert src.to_json() == source_from_loopy(G.build_gemm(pr, params)).to_json()
    assert T.register_source(replace(pr, b_layout="panel8", ldb=8), params) is None
