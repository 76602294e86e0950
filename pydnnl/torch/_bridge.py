"""Moving tensors between PyTorch and pydnnl engines.

A CPU engine shares host memory with PyTorch where OpenCL can use it in place
(``CL_MEM_USE_HOST_PTR`` over the tensor's storage); a GPU engine takes one copy each way.
Results written into shared host memory are visible once the stream has finished where the
runtime's kernels write the host pages themselves (checked once per engine); elsewhere the
buffer is mapped to bring them in. A buffer is made per call (about a microsecond), so a
tensor changed in place between calls is always read as it is then.
"""
from __future__ import annotations

import functools
import threading
import warnings

import numpy as np
import torch

from .. import engine as _engine
from .. import memory as _memory
from .. import stream as _stream
from ..engine import _cl
from ..error import invalid_arguments

F32 = _memory.data_type.f32
_state = threading.local()
_streams: dict = {}
_writes_through: dict = {}


def default_engine() -> _engine:
    """The engine modules use unless given one: ``engine(cpu, 0)`` until changed."""
    eng = getattr(_state, "engine", None)
    if eng is None:
        eng = _state.engine = _engine(_engine.kind.cpu, 0)
    return eng


def set_default_engine(eng: _engine) -> None:
    """Make ``eng`` the engine of modules created afterwards without an ``engine=``."""
    if not isinstance(eng, _engine):
        raise invalid_arguments(
            f"set_default_engine: expected a pydnnl.engine, got {type(eng).__name__}")
    _state.engine = eng


def resolve_engine(eng) -> _engine:
    """``None`` (the default engine), a pydnnl engine, or ``"cpu"``/``"gpu"``."""
    if eng is None:
        return default_engine()
    if isinstance(eng, _engine):
        return eng
    if eng in ("cpu", "gpu"):
        return _engine(_engine.kind[eng], 0)
    raise invalid_arguments(
        f"engine: expected None, a pydnnl.engine, 'cpu' or 'gpu', got {eng!r}")


def stream_of(eng: _engine) -> _stream:
    """One in-order stream per engine, shared by every module on it."""
    s = _streams.get(eng)
    if s is None:
        s = _streams[eng] = _stream(eng)
    return s


def _shareable(t: torch.Tensor, eng: _engine) -> bool:
    return (is_cpu(eng) and t.device.type == "cpu" and t.dtype == torch.float32
            and t.is_contiguous() and t.numel() > 0)


def is_cpu(eng: _engine) -> bool:
    return eng.get_kind() == _engine.kind.cpu


def plain_tag(ndims: int) -> str:
    """The row-major format tag of ``ndims`` dimensions (``a``, ``ab``, ``abc``, ...)."""
    return "abcdefghijkl"[:ndims]


@functools.lru_cache(maxsize=4096)
def _plain_desc(shape: tuple[int, ...]) -> _memory.desc:
    return _memory.desc(list(shape), F32, plain_tag(len(shape)))


def plain_desc(shape) -> _memory.desc:
    """The row-major f32 desc of ``shape``, made once per shape: building and comparing descs
    costs more than the small primitives they feed. Descs are never changed in place."""
    return _plain_desc(tuple(int(d) for d in shape))


def to_memory(t: torch.Tensor, eng: _engine, desc=None):
    """A pydnnl memory holding ``t`` (float32, row-major unless ``desc`` says otherwise).

    On a CPU engine a contiguous float32 CPU tensor is used in place; otherwise the values
    are copied. ``desc`` must describe ``t``'s shape; a non-plain desc always copies (the
    values are laid out into it).
    """
    td = t.detach()
    shape = tuple(td.shape)
    plain = _plain_desc(shape)
    if desc is None:
        desc = plain
    elif desc is not plain and tuple(desc.get_dims()) != shape:
        raise invalid_arguments(
            f"to_memory: tensor of shape {shape} for a desc of dims "
            f"{tuple(desc.get_dims())}")
    if _shareable(td, eng) and (desc is plain or desc == plain):
        cl = _cl()
        buf = cl.Buffer(eng.context, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR,
                        hostbuf=td.numpy())
        m = _memory(desc, eng, buf)
        m._torch_host = td  # keep the storage alive as long as the memory
        return m
    return _memory(desc, eng, td.to("cpu", torch.float32).numpy())


def empty_memory(shape, eng: _engine, desc=None):
    """A memory for a result, with the tensor it will be read into (shared where possible).

    Returns ``(memory, tensor)``; call :func:`to_torch` on the pair once the work is enqueued.
    """
    shape = tuple(int(d) for d in shape)
    plain = plain_desc(shape)
    if desc is None:
        desc = plain
    t = torch.empty(shape, dtype=torch.float32)
    if is_cpu(eng) and t.numel() and (desc is plain or desc == plain):
        m = to_memory(t, eng, desc)
        m._torch_host = t  # to_torch recognises its result tensor by identity
        return m, t
    return _memory(desc, eng), t


def to_torch(m, t: torch.Tensor | None = None, stream=None,
             finished: bool = False) -> torch.Tensor:
    """The values of ``m`` as a float32 CPU tensor, after ``stream`` (or the engine's) finishes.

    ``t`` is the tensor from :func:`empty_memory` (shared with ``m`` where it could be): it is
    made current and returned; otherwise the values are copied into a new tensor.
    ``finished``: the caller has just waited for the stream (reading several results).
    """
    eng = m.get_engine()
    s = stream or stream_of(eng)
    host = getattr(m, "_torch_host", None)
    if host is not None and (t is None or host is t):
        if not finished:
            s.wait()
        if not _kernels_write_through(eng):
            # the runtime keeps a device copy: a map brings the values into the pages
            cl = _cl()
            view, _ = cl.enqueue_map_buffer(s.queue, m.buffer, cl.map_flags.READ, 0,
                                            (host.numel(),), np.float32, is_blocking=True)
            view.base.release(s.queue)
            s.wait()
        return host
    if not finished:
        s.wait()
    values = torch.from_numpy(np.ascontiguousarray(m.to_numpy(), dtype=np.float32))
    if t is None:
        return values
    t.copy_(values.reshape(t.shape))
    return t


def _kernels_write_through(eng: _engine) -> bool:
    """Whether kernels on ``eng`` write ``USE_HOST_PTR`` buffers straight into the host pages
    (as CPU runtimes do), so that finishing the stream is enough and the map (the dearest
    step of a small call) can be skipped. Found once per engine by a kernel write that the
    host must see without a map."""
    ok = _writes_through.get(eng)
    if ok is None:
        cl = _cl()
        # allocated as results are: a runtime may treat host pointers by their alignment
        host = torch.zeros(64).numpy()
        buf = cl.Buffer(eng.context, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR,
                        hostbuf=host)
        prg = cl.Program(eng.context, "__kernel void probe(__global float *a) "
                                      "{ a[get_global_id(0)] = 1.0f + get_global_id(0); }")
        q = stream_of(eng).queue
        with warnings.catch_warnings():  # the compiler's chatter about a one-line kernel
            warnings.simplefilter("ignore")
            prg = prg.build()
        prg.probe(q, host.shape, None, buf)
        q.finish()
        ok = _writes_through[eng] = bool((host == np.arange(1, 65)).all())
    return ok


def to_device(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``t`` moved to ``like``'s device (results go back where the inputs came from)."""
    return t if t.device == like.device else t.to(like.device)
