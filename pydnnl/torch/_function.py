"""Shared machinery of the ``pydnnl.torch`` modules: the engine a module runs on, its
per-problem primitive cache, input checks, and memories over PyTorch tensors."""
from __future__ import annotations

import torch

from .. import memory as _memory
from ..error import invalid_arguments, unimplemented
from . import _bridge as B

F32 = B.F32


def desc(shape, strides=None) -> _memory.desc:
    """An f32 desc of ``shape``: row-major (``strides`` None or row-major ones), or with the
    given element ``strides``."""
    shape = [int(d) for d in shape]
    if strides is None or tuple(strides) == _row_major(shape):
        return _memory.desc(shape, F32, B.plain_tag(len(shape)))
    return _memory.desc(shape, F32, [int(s) for s in strides])


def _row_major(shape) -> tuple[int, ...]:
    s, out = 1, []
    for d in reversed(shape):
        out.append(s)
        s *= d
    return tuple(reversed(out))


class _State:
    """A module's engine and its primitives per problem key.

    A deep copy (``copy.deepcopy(model)``) keeps the engine and starts with no primitives;
    pickling keeps neither (the restored module runs on the default engine).
    """

    def __init__(self, engine):
        self.engine = B.resolve_engine(engine)
        self.prims: dict = {}

    def __deepcopy__(self, memo):
        return _State(self.engine)

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        self.__init__(None)


class PydnnlModule:
    """Mixin of every ``pydnnl.torch`` module: the engine and the primitive cache."""

    def _pydnnl_init(self, engine) -> None:
        self._pydnnl = _State(engine)

    @property
    def engine(self):
        """The pydnnl engine the module's primitives run on."""
        return self._pydnnl.engine

    @engine.setter
    def engine(self, engine) -> None:
        self._pydnnl = _State(engine)

    def _prims(self, key, build):
        """The primitives of problem ``key``, built by ``build(engine)`` on first use."""
        cache = self._pydnnl.prims
        p = cache.get(key)
        if p is None:
            p = cache[key] = build(self._pydnnl.engine)
        return p


def who(module) -> str:
    return type(module).__name__


def check_input(name: str, x, ndims: tuple[int, ...]) -> None:
    """``x`` must be a float32 tensor of one of ``ndims`` dims (raised before any work)."""
    if not isinstance(x, torch.Tensor):
        raise invalid_arguments(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.float32:
        raise unimplemented(f"{name}: expected dtype torch.float32, got {x.dtype} "
                            f"(pydnnl.torch modules compute in float32)")
    if ndims and x.dim() not in ndims:
        want = " or ".join(str(n) for n in ndims)
        raise invalid_arguments(
            f"{name}: expected a tensor of {want} dims, got {x.dim()} (shape {tuple(x.shape)})")


def check_param(name: str, p, shape) -> None:
    """A parameter the user may have replaced must still be float32 of the expected shape."""
    if p is None:
        return
    if p.dtype != torch.float32:
        raise unimplemented(f"{name}: expected dtype torch.float32, got {p.dtype}")
    if tuple(p.shape) != tuple(shape):
        raise invalid_arguments(
            f"{name}: expected shape {tuple(shape)}, got {tuple(p.shape)}")


def grad_needed(*tensors) -> bool:
    """Whether autograd will call the backward of an operation on ``tensors``."""
    return torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in tensors)


class _NoGraph:
    """The ``ctx`` of a forward run outside autograd: what it saves is dropped."""

    def save_for_backward(self, *tensors) -> None:
        pass


def apply(fn, grad: bool, *args):
    """``fn.apply(*args)`` when a gradient is needed; otherwise ``fn``'s forward alone, since
    autograd's bookkeeping costs as much as a small primitive and nothing would use it."""
    if grad:
        return fn.apply(*args)
    return fn.forward(_NoGraph(), *args)


def tuple_of(name: str, v, n: int, minimum: int) -> tuple[int, ...]:
    """``v`` (an int or a sequence of ``n`` ints, each ``>= minimum``) as an ``n``-tuple."""
    t = (v,) * n if isinstance(v, int) else tuple(v) if isinstance(v, (tuple, list)) else None
    if (t is None or len(t) != n or not all(isinstance(i, int) and not isinstance(i, bool)
                                            for i in t)):
        raise invalid_arguments(f"{name}: expected an int or a tuple of {n} ints, got {v!r}")
    if any(i < minimum for i in t):
        raise invalid_arguments(f"{name}: expected values >= {minimum}, got {v!r}")
    return t


def output_sizes(cls: str, input, sizes) -> tuple[int, ...]:
    """The spatial output ``sizes`` (of dims 2, 3, ...) as a tuple; each must be positive."""
    for i, o in enumerate(sizes):
        if o <= 0:
            raise invalid_arguments(
                f"{cls}: input: output size {o} of spatial dim {2 + i} is not positive "
                f"for input shape {tuple(input.shape)}")
    return tuple(sizes)


def memory_of(t: torch.Tensor, eng):
    """A memory holding ``t`` row-major (shared with a CPU tensor on a CPU engine)."""
    return B.to_memory(t, eng)


def view_memory(base: torch.Tensor, view_of, eng):
    """A memory of ``view_of(base)`` (a permuted view) over ``base``'s row-major storage.

    ``base`` goes to the engine row-major (shared or copied); the view's strides then
    describe the same buffer, so nothing is rearranged.
    """
    base = base.contiguous()
    view = view_of(base)
    m0 = B.to_memory(base, eng)
    m = _memory(desc(view.shape, view.stride()), eng, m0.buffer)
    m._base_memory = m0  # the buffer (and the tensor it may share) lives as long as m
    return m


def output(shape, eng):
    """``(memory, tensor)`` for a row-major result; read it back with :func:`result`."""
    return B.empty_memory(shape, eng)


def output_view(shape, view_of, eng):
    """A result written through a permuted view: ``view_of(tensor)`` gives the logical view
    of the row-major ``shape`` tensor that the primitive writes. Returns ``(memory of the
    view, (memory, tensor))``; read the second with :func:`result`."""
    m0, t = B.empty_memory(shape, eng)
    v = view_of(t)
    m = _memory(desc(v.shape, v.stride()), eng, m0.buffer)
    return m, (m0, t)


def result(pair, like: torch.Tensor) -> torch.Tensor:
    """The finished result ``pair`` (from :func:`output`) on ``like``'s device."""
    m, t = pair
    return B.to_device(B.to_torch(m, t), like)


def execute(eng, prim, args: dict) -> None:
    prim.execute(B.stream_of(eng), args)


def empty_result(shape, *inputs) -> torch.Tensor:
    """The (empty) result of an operation on a tensor with no elements, with zero gradients
    for ``inputs``: there is nothing for a primitive to compute."""
    out = inputs[0].new_zeros(shape)
    for t in inputs:
        if t is not None:
            out = out + t.sum() * 0
    return out
