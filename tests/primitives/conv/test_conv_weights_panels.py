"""im2col + GEMM forward with weights ``format_tag.any``: the weights resolve to the GEMM's
packed panels (``A<k...>b<w>a``), which the forward reads in place; backward descriptors
created with that forward as hint take the layout and stay exact (against the numpy
reference)."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference import conv as R

MD, F32, A = dnnl.memory.desc, dnnl.memory.data_type.f32, dnnl.algorithm
PK = dnnl.prop_kind
SOLVER = "im2col_gemm"

# (name, N, IC, OC, spatial, kernel, groups): 3x3, a 1x1, a 1-D kernel; OC 37 leaves a tail
# in any panel width; mb 3 runs several images per GEMM; the widths of backward data's panels
# that divide Kf or not take its two paths
CASES = {
    "3x3": (1, 16, 32, (7, 7), (3, 3), 1),
    "3x3_tail_mb3": (3, 8, 37, (5, 6), (3, 3), 1),
    "1x1": (2, 24, 40, (4, 4), (1, 1), 1),
    # Kf = 288: backward data reorders the panels straight into its own packed B
    "3x3_kf288_tail": (1, 32, 37, (5, 5), (3, 3), 1),
    "1d": (1, 8, 20, (9,), (3,), 1),
}


def _panel(md) -> int | None:
    """The panel width of a weights desc in the forward's panels, else None."""
    n = len(md.dims)
    if len(md.inner_blks) != 1 or md.inner_idxs[0] != 0:
        return None
    w = int(md.inner_blks[0])
    want = MD(md.dims, F32, "A" + "cdefgh"[:n - 2] + "b" + f"{w}a")
    return w if md == want else None


def _pads(sp, k):
    return [kk // 2 for kk in k], [kk // 2 for kk in k]


def _to(engine, stream, arr, plain_tag, md):
    """A memory of ``md`` holding ``arr`` (given in ``plain_tag``), through pydnnl's reorder."""
    user = dnnl.memory(MD(list(arr.shape), F32, plain_tag), engine, arr)
    mem = dnnl.memory(md, engine)
    dnnl.reorder(user, mem).execute(stream, user, mem)
    stream.wait()
    return mem


def _plain(engine, stream, mem, plain_tag):
    """``mem``'s values as an array, through pydnnl's reorder into ``plain_tag``."""
    out = dnnl.memory(MD(mem.get_desc().dims, F32, plain_tag), engine)
    dnnl.reorder(mem, out).execute(stream, mem, out)
    stream.wait()
    return out.to_numpy()


def _tag(nd: int) -> str:
    return "abcdefgh"[:nd]


class _Case:
    def __init__(self, engine, stream, name, attr=None, bias=True):
        N, IC, OC, sp, k, G = CASES[name]
        nsp = len(sp)
        self.engine, self.stream = engine, stream
        self.pl, self.pr = _pads(sp, k)
        self.strides = [1] * nsp
        self.src_dims, self.dst_dims = [N, IC, *sp], [N, OC, *sp]
        self.w_dims = [OC, IC // G, *k] if G == 1 else [G, OC // G, IC // G, *k]
        rng = np.random.default_rng(3)
        self.x = rng.standard_normal(self.src_dims).astype(np.float32)
        self.w = (rng.standard_normal(self.w_dims) / 4).astype(np.float32)
        self.b = rng.standard_normal(OC).astype(np.float32)
        self.dy = rng.standard_normal(self.dst_dims).astype(np.float32)
        self.prior = rng.standard_normal(self.dst_dims).astype(np.float32)
        self.G = G
        any_ = dnnl.memory.format_tag.any
        self.fwd_pd = dnnl.convolution_forward.primitive_desc(
            engine, PK.forward_training, A.convolution_direct, MD(self.src_dims, F32, any_),
            MD(self.w_dims, F32, any_), MD([OC], F32, any_) if bias else None,
            MD(self.dst_dims, F32, any_), self.strides, self.pl, self.pr,
            attr=attr, solver=SOLVER)
        self.bias = bias

    def ref_fwd(self):
        return R.conv_forward(self.x, self.w, self.b if self.bias else None, self.strides,
                              [0] * len(self.strides), self.pl, self.pr, groups=self.G,
                              dtype=np.float64)

    def run_fwd(self, prior=None):
        e, s, pd = self.engine, self.stream, self.fwd_pd
        nd = len(self.src_dims)
        args = {dnnl.ARG_SRC: _to(e, s, self.x, _tag(nd), pd.src_desc()),
                dnnl.ARG_WEIGHTS: _to(e, s, self.w, _tag(len(self.w_dims)), pd.weights_desc()),
                dnnl.ARG_DST: _to(e, s, self.dy * 0 if prior is None else prior, _tag(nd),
                                  pd.dst_desc())}
        if self.bias:
            args[dnnl.ARG_BIAS] = _to(e, s, self.b, "a", pd.bias_desc())
        prim = dnnl.convolution_forward(pd)
        for _ in range(2):  # twice: a second execution reads the same weights again
            prim.execute(s, args)
        s.wait()
        return _plain(e, s, args[dnnl.ARG_DST], _tag(nd))


def _check(got, ref, what, tol=1e-5):
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err <= tol, f"{what}: max relative error {err:.3g}"


@pytest.fixture(scope="module", params=list(CASES))
def case(request, engine, stream):
    return _Case(engine, stream, request.param)


def test_forward_weights_any_resolves_to_panels(engine, case):
    pd = case.fwd_pd
    assert pd.get_solver() == SOLVER
    w = _panel(pd.weights_desc())
    if engine.get_kind() == dnnl.engine.kind.cpu:
        assert w is not None, f"weights_desc {pd.weights_desc()} is no panel layout"
    if w is None:  # a device whose tuned GEMM reads plain B keeps the plain order
        assert not pd.weights_desc().inner_blks
        return
    assert w > 1
    if case.w_dims[0] == 37:
        assert 37 % w, "the tail case must leave a partial panel"


def test_forward_matches_reference(case):
    _check(case.run_fwd(), case.ref_fwd(), "forward")


def test_weights_padding_zero_filled(engine, stream, case):
    md = case.fwd_pd.weights_desc()
    mem = _to(engine, stream, case.w, _tag(len(case.w_dims)), md)
    raw = mem.read_raw()
    w = _panel(md)
    if w is None or case.w_dims[0] % w == 0:
        return
    OC, rest = case.w_dims[0], int(np.prod(case.w_dims[1:]))
    last = raw[-rest * w:].reshape(rest, w)
    assert not last[:, OC % w:].any(), "padded output channels must be zero"


def test_backward_data_with_hint(engine, stream, case):
    e, s = engine, stream
    any_ = dnnl.memory.format_tag.any
    pd = dnnl.convolution_backward_data.primitive_desc(
        e, A.convolution_direct, MD(case.src_dims, F32, any_), MD(case.w_dims, F32, any_),
        MD(case.dst_dims, F32, any_), case.strides, case.pl, case.pr, case.fwd_pd,
        solver=SOLVER)
    assert pd.weights_desc() == case.fwd_pd.weights_desc()
    nd = len(case.src_dims)
    args = {dnnl.ARG_DIFF_DST: _to(e, s, case.dy, _tag(nd), pd.diff_dst_desc()),
            dnnl.ARG_WEIGHTS: _to(e, s, case.w, _tag(len(case.w_dims)), pd.weights_desc()),
            dnnl.ARG_DIFF_SRC: dnnl.memory(pd.diff_src_desc(), e)}
    prim = dnnl.convolution_backward_data(pd)
    for _ in range(2):
        prim.execute(s, args)
    s.wait()
    got = _plain(e, s, args[dnnl.ARG_DIFF_SRC], _tag(nd))
    ref = R.conv_backward_data(case.dy, case.w, case.src_dims, case.strides,
                               [0] * len(case.strides), case.pl, case.pr, dtype=np.float64)
    _check(got, ref, "backward data")


def test_backward_weights_with_hint(engine, stream, case):
    e, s = engine, stream
    any_ = dnnl.memory.format_tag.any
    OC = case.dst_dims[1]
    pd = dnnl.convolution_backward_weights.primitive_desc(
        e, A.convolution_direct, MD(case.src_dims, F32, any_), MD(case.w_dims, F32, any_),
        MD([OC], F32, any_), MD(case.dst_dims, F32, any_), case.strides, case.pl, case.pr,
        case.fwd_pd, solver=SOLVER)
    assert pd.diff_weights_desc() == case.fwd_pd.weights_desc()
    nd = len(case.src_dims)
    args = {dnnl.ARG_SRC: _to(e, s, case.x, _tag(nd), pd.src_desc()),
            dnnl.ARG_DIFF_DST: _to(e, s, case.dy, _tag(nd), pd.diff_dst_desc()),
            dnnl.ARG_DIFF_WEIGHTS: dnnl.memory(pd.diff_weights_desc(), e),
            dnnl.ARG_DIFF_BIAS: dnnl.memory(pd.diff_bias_desc(), e)}
    prim = dnnl.convolution_backward_weights(pd)
    # the full panels in one batched launch, a ragged last panel in its own
    w = _panel(pd.diff_weights_desc())
    gemms = [st for st in prim._plan.steps if getattr(st, "name", "") == "gemm"]
    assert len(gemms) == (OC // w > 0) + (OC % w > 0), (w, len(gemms))
    for _ in range(2):
        prim.execute(s, args)
    s.wait()
    dw = _plain(e, s, args[dnnl.ARG_DIFF_WEIGHTS], _tag(len(case.w_dims)))
    rw, rb = R.conv_backward_weights(case.x, case.dy, case.w_dims, case.strides,
                                     [0] * len(case.strides), case.pl, case.pr,
                                     dtype=np.float64)
    _check(dw, rw, "diff weights")
    _check(args[dnnl.ARG_DIFF_BIAS].to_numpy(), rb, "diff bias")


@pytest.mark.parametrize("chain", ["relu", "sum_relu", "sum_only"])
def test_post_ops_fused(engine, stream, chain):
    po = dnnl.post_ops()
    if chain.startswith("sum"):
        po.append_sum(0.5)
    if chain.endswith("relu"):
        po.append_eltwise(A.eltwise_relu, 0.0, 0.0)
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    c = _Case(engine, stream, "3x3_tail_mb3", attr=attr)
    if engine.get_kind() == dnnl.engine.kind.cpu:
        assert _panel(c.fwd_pd.weights_desc()) is not None
    ref = c.ref_fwd()
    if chain.startswith("sum"):
        ref = ref + 0.5 * c.prior
    if chain.endswith("relu"):
        ref = np.maximum(ref, 0)
    # the sum reads the prior dst: two executions accumulate twice
    got = c.run_fwd(prior=c.prior) if not chain.startswith("sum") else None
    if got is None:
        e, s, pd = engine, stream, c.fwd_pd
        args = {dnnl.ARG_SRC: _to(e, s, c.x, "abcd", pd.src_desc()),
                dnnl.ARG_WEIGHTS: _to(e, s, c.w, "abcd", pd.weights_desc()),
                dnnl.ARG_BIAS: _to(e, s, c.b, "a", pd.bias_desc()),
                dnnl.ARG_DST: _to(e, s, c.prior, "abcd", pd.dst_desc())}
        dnnl.convolution_forward(pd).execute(s, args)
        s.wait()
        got = _plain(e, s, args[dnnl.ARG_DST], "abcd")
    _check(got, ref, chain)


def test_no_bias(engine, stream):
    c = _Case(engine, stream, "3x3", bias=False)
    _check(c.run_fwd(), c.ref_fwd(), "forward without bias")


@pytest.mark.parametrize("width", [8, 7, 64])
def test_explicit_panels_of_other_widths(engine, stream, width):
    """Weights given in panels of a width the tuned kernel may not read: read side by side,
    or reordered into its packed B each execution; exact either way."""
    c = _Case(engine, stream, "3x3_tail_mb3")
    N, IC, OC, sp, k, _ = CASES["3x3_tail_mb3"]
    pd = dnnl.convolution_forward.primitive_desc(
        engine, PK.forward_inference, A.convolution_direct, c.fwd_pd.src_desc(),
        MD(c.w_dims, F32, f"Acdb{width}a"), c.fwd_pd.bias_desc(), c.fwd_pd.dst_desc(),
        c.strides, c.pl, c.pr, solver=SOLVER)
    c.fwd_pd = pd
    _check(c.run_fwd(), c.ref_fwd(), f"forward, panels of {width}")


def test_groups_keep_plain_weights(engine, stream):
    any_ = dnnl.memory.format_tag.any
    G, N, IC, OC = 2, 1, 8, 16
    pd = dnnl.convolution_forward.primitive_desc(
        engine, PK.forward_training, A.convolution_direct, MD([N, IC, 5, 5], F32, any_),
        MD([G, OC // G, IC // G, 3, 3], F32, any_), None, MD([N, OC, 5, 5], F32, any_),
        [1, 1], [1, 1], [1, 1], solver=SOLVER)
    assert not pd.weights_desc().inner_blks
    rng = np.random.default_rng(5)
    x = rng.standard_normal((N, IC, 5, 5)).astype(np.float32)
    w = rng.standard_normal((G, OC // G, IC // G, 3, 3)).astype(np.float32)
    args = {dnnl.ARG_SRC: _to(engine, stream, x, "abcd", pd.src_desc()),
            dnnl.ARG_WEIGHTS: _to(engine, stream, w, "abcde", pd.weights_desc()),
            dnnl.ARG_DST: dnnl.memory(pd.dst_desc(), engine)}
    dnnl.convolution_forward(pd).execute(stream, args)
    stream.wait()
    ref = R.conv_forward(x, w, None, [1, 1], [0, 0], [1, 1], [1, 1], groups=G,
                         dtype=np.float64)
    _check(_plain(engine, stream, args[dnnl.ARG_DST], "abcd"), ref, "grouped forward")


@pytest.mark.parametrize("solver", ["direct", "implicit_gemm", "winograd_f2x3"])
def test_other_solvers_keep_their_layout(engine, solver):
    any_ = dnnl.memory.format_tag.any
    alg = A.convolution_winograd if solver.startswith("winograd") else A.convolution_direct
    try:
        pd = dnnl.convolution_forward.primitive_desc(
            engine, PK.forward_training, alg, MD([1, 16, 7, 7], F32, any_),
            MD([32, 16, 3, 3], F32, any_), None, MD([1, 32, 7, 7], F32, any_),
            [1, 1], [1, 1], [1, 1], solver=solver)
    except dnnl.unimplemented as e:  # the solver does not apply on this device
        pytest.skip(str(e))
    assert _panel(pd.weights_desc()) is None


@pytest.mark.parametrize("direction", ["bwd_d", "bwd_w"])
@pytest.mark.parametrize("solver", ["direct", "implicit_gemm", "winograd_f2x3", None])
def test_other_backward_solvers_take_the_panels(engine, stream, direction, solver):
    """A backward descriptor of another solver (or the automatic choice) given the forward's
    panels as hint reads or writes them exactly."""
    c = _Case(engine, stream, "3x3_kf288_tail")
    e, s = engine, stream
    any_ = dnnl.memory.format_tag.any
    alg = A.convolution_winograd if solver == "winograd_f2x3" else A.convolution_auto
    OC = c.dst_dims[1]
    try:
        if direction == "bwd_d":
            pd = dnnl.convolution_backward_data.primitive_desc(
                e, alg, MD(c.src_dims, F32, any_), MD(c.w_dims, F32, any_),
                MD(c.dst_dims, F32, any_), c.strides, c.pl, c.pr, c.fwd_pd, solver=solver)
        else:
            pd = dnnl.convolution_backward_weights.primitive_desc(
                e, alg, MD(c.src_dims, F32, any_), MD(c.w_dims, F32, any_),
                MD([OC], F32, any_), MD(c.dst_dims, F32, any_), c.strides, c.pl, c.pr,
                c.fwd_pd, solver=solver)
    except dnnl.unimplemented as err:  # the solver does not apply on this device
        pytest.skip(str(err))
    if direction == "bwd_d":
        args = {dnnl.ARG_DIFF_DST: _to(e, s, c.dy, "abcd", pd.diff_dst_desc()),
                dnnl.ARG_WEIGHTS: _to(e, s, c.w, "abcd", pd.weights_desc()),
                dnnl.ARG_DIFF_SRC: dnnl.memory(pd.diff_src_desc(), e)}
        dnnl.convolution_backward_data(pd).execute(s, args)
        s.wait()
        got = _plain(e, s, args[dnnl.ARG_DIFF_SRC], "abcd")
        ref = R.conv_backward_data(c.dy, c.w, c.src_dims, c.strides, [0, 0], c.pl, c.pr,
                                   dtype=np.float64)
    else:
        args = {dnnl.ARG_SRC: _to(e, s, c.x, "abcd", pd.src_desc()),
                dnnl.ARG_DIFF_DST: _to(e, s, c.dy, "abcd", pd.diff_dst_desc()),
                dnnl.ARG_DIFF_WEIGHTS: dnnl.memory(pd.diff_weights_desc(), e),
                dnnl.ARG_DIFF_BIAS: dnnl.memory(pd.diff_bias_desc(), e)}
        dnnl.convolution_backward_weights(pd).execute(s, args)
        s.wait()
        got = _plain(e, s, args[dnnl.ARG_DIFF_WEIGHTS], "abcd")
        ref = R.conv_backward_weights(c.x, c.dy, c.w_dims, c.strides, [0, 0], c.pl, c.pr,
                                      dtype=np.float64)[0]
    _check(got, ref, f"{direction} {pd.get_solver()}", 3e-5)
