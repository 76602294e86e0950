"""Moving tensors between PyTorch and pydnnl engines.

A CPU engine shares host memory with PyTorch where OpenCL can use it in place
(``CL_MEM_USE_HOST_PTR`` over the tensor's storage); a GPU engine takes one copy each way.
Results written into shared host memory are made visible to the host by mapping the buffer
once the stream has finished (a no-op copy where the runtime really shares the pages).
"""
from __future__ import annotations

import threading

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


def to_memory(t: torch.Tensor, eng: _engine, desc=None):
    """A pydnnl memory holding ``t`` (float32, row-major unless ``desc`` says otherwise).

    On a CPU engine a contiguous float32 CPU tensor is used in place; otherwise the values
    are copied. ``desc`` must describe ``t``'s shape; a non-plain desc always copies (the
    values are laid out into it).
    """
    t = t.detach()
    if desc is None:
        desc = _memory.desc(list(t.shape), F32, plain_tag(t.dim()))
    if tuple(desc.get_dims()) != tuple(t.shape):
        raise invalid_arguments(
            f"to_memory: tensor of shape {tuple(t.shape)} for a desc of dims "
            f"{tuple(desc.get_dims())}")
    if _shareable(t, eng) and desc.is_dense() and desc == _memory.desc(
            list(t.shape), F32, plain_tag(t.dim())):
        host = t.numpy()
        cl = _cl()
        buf = cl.Buffer(eng.context, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR,
                        hostbuf=host)
        m = _memory(desc, eng, buf)
        m._torch_host = t  # keep the storage alive as long as the memory
        return m
    return _memory(desc, eng, t.to("cpu", torch.float32).numpy())


def empty_memory(shape, eng: _engine, desc=None):
    """A memory for a result, with the tensor it will be read into (shared where possible).

    Returns ``(memory, tensor)``; call :func:`to_torch` on the pair once the work is enqueued.
    """
    shape = tuple(int(d) for d in shape)
    if desc is None:
        desc = _memory.desc(list(shape), F32, plain_tag(len(shape)))
    t = torch.empty(shape, dtype=torch.float32)
    if is_cpu(eng) and t.numel() and desc == _memory.desc(list(shape), F32,
                                                          plain_tag(len(shape))):
        return to_memory(t, eng, desc), t
    return _memory(desc, eng), t


def to_torch(m, t: torch.Tensor | None = None, stream=None) -> torch.Tensor:
    """The values of ``m`` as a float32 CPU tensor, after ``stream`` (or the engine's) finishes.

    ``t`` is the tensor from :func:`empty_memory` (shared with ``m`` where it could be): it is
    made current and returned; otherwise the values are copied into a new tensor.
    """
    eng = m.get_engine()
    (stream or stream_of(eng)).wait()
    host = getattr(m, "_torch_host", None)
    if host is not None and (t is None or host is t):
        cl = _cl()
        view, _ = cl.enqueue_map_buffer(eng.default_queue, m.buffer, cl.map_flags.READ, 0,
                                        (host.numel(),), np.float32, is_blocking=True)
        view.base.release(eng.default_queue)
        eng.default_queue.finish()
        return host
    values = torch.from_numpy(np.ascontiguousarray(m.to_numpy(), dtype=np.float32))
    if t is None:
        return values
    t.copy_(values.reshape(t.shape))
    return t


def to_device(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``t`` moved to ``like``'s device (results go back where the inputs came from)."""
    return t if t.device == like.device else t.to(like.device)
