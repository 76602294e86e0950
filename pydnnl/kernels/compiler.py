"""Turning generated kernels into launchable OpenCL kernels, cached on disk.

A kernel generator returns a loopy ``TranslationUnit`` whose sizes are all fixed. Code
generation runs once per (family, problem, parameters): the OpenCL source and launch sizes are
stored in a per-user cache folder, so a second process neither imports loopy nor regenerates;
the OpenCL build itself is cached by pyopencl per device and source.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..engine import _cl
from ..error import runtime_error

# Bump when generators change in a way their keys do not capture (the sources of the kernel
# generators and cell specs are hashed into every key as well).
GENERATOR_VERSION = "1"
_SOURCES_HASH: str | None = None


def _generator_sources_hash() -> str:
    """Hash of the code that generates kernels, so an edited generator never hits old entries."""
    global _SOURCES_HASH
    if _SOURCES_HASH is None:
        root = Path(__file__).resolve().parent.parent
        h = hashlib.sha256()
        for sub in ("kernels", "cells"):
            for f in sorted((root / sub).glob("*.py")):
                h.update(f.name.encode())
                h.update(f.read_bytes())
        _SOURCES_HASH = h.hexdigest()[:16]
    return _SOURCES_HASH


def cache_dir() -> Path:
    """Folder of the generated-kernel cache (``PYDNNL_CACHE_DIR`` overrides it)."""
    env = os.environ.get("PYDNNL_CACHE_DIR")
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("pydnnl")) / "kernels"


@dataclass(frozen=True)
class KernelSource:
    """Generated OpenCL source plus what is needed to launch it."""

    name: str
    source: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    arg_names: tuple[str, ...]
    build_options: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "source": self.source,
                           "global_size": list(self.global_size),
                           "local_size": None if self.local_size is None else list(self.local_size),
                           "arg_names": list(self.arg_names),
                           "build_options": list(self.build_options)})

    @classmethod
    def from_json(cls, text: str) -> "KernelSource":
        d = json.loads(text)
        return cls(d["name"], d["source"], tuple(d["global_size"]),
                   None if d["local_size"] is None else tuple(d["local_size"]),
                   tuple(d["arg_names"]), tuple(d.get("build_options", ())))


def source_from_loopy(tu) -> KernelSource:
    """Generate OpenCL source and launch sizes from a loopy TranslationUnit with fixed sizes."""
    import loopy as lp

    code = lp.generate_code_v2(tu).device_code()
    # launch sizes after preprocessing: reductions over local inames only then get their sizes
    pre = lp.preprocess_program(tu)
    knl = pre.default_entrypoint
    gsize, lsize = knl.get_grid_size_upper_bounds_as_exprs(pre.callables_table)

    def _ints(t):
        out = []
        for v in t:
            try:
                out.append(int(v))
            except TypeError:
                raise runtime_error(
                    f"kernel {knl.name}: launch size {v} is not a constant; generators must fix "
                    f"every size parameter") from None
        return tuple(out)

    g, l = _ints(gsize), _ints(lsize)
    if not g and not l:
        g, l = (1,), (1,)
    if not l:
        l = (1,) * len(g)
    while len(l) < len(g):
        l = l + (1,)
    while len(g) < len(l):
        g = g + (1,)
    global_size = tuple(gi * li for gi, li in zip(g, l))
    return KernelSource(knl.name, code, global_size, l, _signature_args(code, knl.name))


def _signature_args(code: str, name: str) -> tuple[str, ...]:
    """Parameter names of kernel ``name`` as generated (loopy leaves unused ones out)."""
    import re

    m = re.search(r"__kernel\s+void\s+(?:__attribute__\s*\(\(.*?\)\)\s*)?" + re.escape(name)
                  + r"\s*\((.*?)\)\s*\{", code, re.S)
    if m is None:
        raise runtime_error(f"kernel {name}: could not find its signature in the generated code")
    params = [p.strip() for p in m.group(1).split(",") if p.strip()]
    return tuple(re.findall(r"[A-Za-z_]\w*", p)[-1] for p in params)


class Kernel:
    """A built OpenCL kernel with fixed launch sizes: ``kernel(stream, buf_a, buf_b, ...)``."""

    def __init__(self, context, device, src: KernelSource):
        import warnings

        cl = _cl()
        self.src = src
        try:
            with warnings.catch_warnings():
                # drivers print informational build logs; pyopencl turns them into warnings
                warnings.simplefilter("ignore", cl.CompilerWarning)
                self.program = cl.Program(context, src.source).build(
                    options=list(src.build_options), devices=[device])
        except cl.Error as e:
            raise runtime_error(f"kernel {src.name}: OpenCL build failed: {e}") from None
        self.kernel = getattr(self.program, src.name)
        self.name = src.name

    def __call__(self, stream, *args, wait_for=None):
        """Enqueue on ``stream`` (a ``pydnnl.stream``); args in the kernel's argument order."""
        cl = _cl()
        self.kernel.set_args(*args)
        evt = cl.enqueue_nd_range_kernel(stream.queue, self.kernel, self.src.global_size,
                                         self.src.local_size, wait_for=wait_for)
        stream.record(self.name, evt, self.src.global_size)
        return evt


    def bound(self, args) -> "BoundKernel":
        """A private copy of the kernel with ``args`` set once; see :class:`BoundKernel`."""
        return BoundKernel(self, args)


class BoundKernel:
    """One launch of a plan: its own ``cl.Kernel`` whose constant arguments are set once.

    ``args`` holds values (set now) and placeholders (objects with a ``key``) resolved per
    launch through a mapping; an argument is set again only when the buffer behind its
    placeholder changed. This keeps a launch at one enqueue: pyopencl's ``set_args`` costs
    tens of microseconds, which adds up over thousands of RNN steps.
    """

    def __init__(self, kernel: Kernel, args):
        cl = _cl()
        self.kernel = kernel
        self.name = kernel.name
        self.k = cl.Kernel(kernel.program, kernel.name)
        self.dyn = []
        for i, a in enumerate(args):
            if hasattr(a, "key"):
                self.dyn.append((i, a.key))
            else:
                self.k.set_arg(i, a)
        self.current = [None] * len(args)
        self.gsize, self.lsize = kernel.src.global_size, kernel.src.local_size

    def launch(self, stream, bufs, wait_for=None):
        cl = _cl()
        for i, key in self.dyn:
            b = bufs[key]
            if self.current[i] is not b:
                self.k.set_arg(i, b)
                self.current[i] = b
        evt = cl.enqueue_nd_range_kernel(stream.queue, self.k, self.gsize, self.lsize,
                                         wait_for=wait_for)
        stream.record(self.name, evt, self.gsize)
        return evt


_mem_cache: dict[tuple, Kernel] = {}
_lock = threading.Lock()


def _key_hash_fast(family: str, key) -> str:
    # loopy's version participates without importing loopy: read it from package metadata
    from importlib.metadata import version

    text = repr((GENERATOR_VERSION, _generator_sources_hash(), family, key, version("loopy")))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def get_kernel(engine, family: str, key, build: Callable[[], object]) -> Kernel:
    """The kernel for ``(family, key)`` on ``engine``, generating it with ``build()`` on a miss.

    ``key`` must capture everything the generated source depends on (problem and tuning
    parameters); ``build`` returns a loopy TranslationUnit or a :class:`KernelSource`.
    """
    mkey = (engine.context.int_ptr, engine.device.int_ptr, family, key)
    with _lock:
        k = _mem_cache.get(mkey)
    if k is not None:
        return k
    h = _key_hash_fast(family, key)
    path = cache_dir() / f"{family}-{h}.json"
    src = None
    if os.environ.get("PYDNNL_NO_KERNEL_CACHE") != "1":
        try:
            src = KernelSource.from_json(path.read_text())
        except (OSError, ValueError, KeyError):
            src = None
    if src is None:
        built = build()
        src = built if isinstance(built, KernelSource) else source_from_loopy(built)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(src.to_json())
            tmp.replace(path)
        except OSError:
            pass  # a read-only cache only costs time
    k = Kernel(engine.context, engine.device, src)
    with _lock:
        _mem_cache[mkey] = k
    return k


def clear_memory_cache() -> None:
    """Forget kernels built in this process (the disk cache stays)."""
    with _lock:
        _mem_cache.clear()
