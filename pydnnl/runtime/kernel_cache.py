"""Generated kernels compiled for an engine, cached in memory and on disk.

A kernel generator returns a loopy ``TranslationUnit`` (its sizes fixed, or runtime size
arguments). Code generation runs once per (family, problem, parameters): the OpenCL source and
launch sizes are stored in a per-user cache folder, so a second process neither imports loopy
nor regenerates. Next to the sources, one program binary per kernel text, device and driver
(``<family>-t<text hash>.<device hash>.bin``: keys with equal texts share it) spares a second
process the OpenCL compilation too, also where pyopencl keeps no binaries (it leaves NVIDIA's
builds to the driver); PoCL's binaries are not kept, its own cache serves it
(:func:`~pydnnl.runtime.heuristics.program_binaries.keeps_program_binaries`).
``PYDNNL_NO_KERNEL_CACHE=1`` turns both off; ``PYOPENCL_NO_CACHE=1`` turns off the binaries
(kernel checkers want source builds). Compilations run on one build thread, whose compiler
starts while the first kernel is generated, and :func:`get_kernel` returns while its kernel
compiles, so that the caller generates the next one meanwhile: a kernel's first use waits
for its own compilation, and :func:`finish_pending` (called when a primitive's creation
ends) waits for every compilation its thread started and raises the first failure.
"""
from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from ..kernels.source import KernelSource, source_from_loopy
from .heuristics.program_binaries import keeps_program_binaries
from .kernel import Kernel, build_costs, warm_up

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


_mem_cache: dict[tuple, Kernel] = {}
_lock = threading.Lock()
_generated = {"kernels_generated": 0, "generate_ms": 0.0}


def creation_costs() -> dict:
    """What this process has spent making kernels so far: ``kernels_generated`` and
    ``generate_ms`` (loopy's import and code generation, on the caller's thread),
    ``programs_built`` and ``build_ms`` (OpenCL compilations from source, on the build
    thread, finished or not), ``compiler_start_ms`` (the compiler's set-up,
    :func:`~pydnnl.runtime.kernel.warm_up`) and ``programs_loaded`` (binaries from the
    cache). Differences of two calls tell what a primitive's creation cost in between."""
    with _lock:
        out = dict(_generated)
    out.update(build_costs())
    return out


@functools.lru_cache(maxsize=None)
def _loopy_version() -> str:
    # loopy's version participates without importing loopy: read it from package metadata
    # (once: a metadata read costs 2-3 ms)
    from importlib.metadata import version

    return version("loopy")


def _key_hash_fast(family: str, key) -> str:
    text = repr((GENERATOR_VERSION, _generator_sources_hash(), family, key, _loopy_version()))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _binary_path(engine, source_path: Path, src: KernelSource) -> Path | None:
    """Where the program binary of ``src`` for ``engine``'s device and driver lives, or
    None where binaries are not cached. Named by the kernel's text (its name, source and
    build options), not by its key: keys whose generated sources are equal share the binary,
    so a new key whose text is cached loads it instead of compiling (LSTM inference's GEMM is
    one text for 256, 384 and 512 channels: its column count is only the launch grid)."""
    if (os.environ.get("PYDNNL_NO_KERNEL_CACHE") == "1"
            or os.environ.get("PYOPENCL_NO_CACHE", "").lower() in ("1", "true", "yes")):
        return None
    info = engine.info
    if not keeps_program_binaries(info):
        return None
    dev = hashlib.sha256(repr((info.signature, info.device_version, src.build_options))
                         .encode()).hexdigest()[:12]
    text = hashlib.sha256(f"{src.name}\0{src.source}".encode()).hexdigest()[:32]
    family = source_path.stem.rsplit("-", 1)[0]
    return source_path.with_name(f"{family}-t{text}.{dev}.bin")


def get_kernel(engine, family: str, key, build: Callable[[], object]) -> Kernel:
    """The kernel for ``(family, key)`` on ``engine``, generating it with ``build()`` on a miss.

    ``key`` must capture everything the generated source depends on (problem and tuning
    parameters); ``build`` returns a loopy TranslationUnit or a :class:`KernelSource`.
    """
    mkey = (engine.context.int_ptr, engine.device.int_ptr, family, key)
    with _lock:
        k = _mem_cache.get(mkey)
    if k is not None and not k.failed:  # (a deferred build that failed is tried again)
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
        warm_up(engine.context, engine.device)  # the compiler starts while we generate
        t0 = time.perf_counter()
        built = build()
        src = built if isinstance(built, KernelSource) else source_from_loopy(built)
        with _lock:
            _generated["kernels_generated"] += 1
            _generated["generate_ms"] += (time.perf_counter() - t0) * 1e3
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(src.to_json())
            tmp.replace(path)
        except OSError:
            pass  # a read-only cache only costs time
    k = Kernel(engine.context, engine.device, src, _binary_path(engine, path, src),
               defer=True)
    if k.built_from == "source":
        pending = getattr(_deferred, "kernels", None)
        if pending is None:
            pending = _outstanding()
            # those built since (by use or on their own) need no waiting; failures stay
            # until raised once
            pending[:] = [x for x in pending if not x.built and not x.reported]
        pending.append(k)
    with _lock:
        _mem_cache[mkey] = k
    return k


# Compiling while the caller generates its next kernel, measured on the 2-core AVX-512 Xeon
# (cold caches, fresh processes, quiet machine): LSTM 512 T=50 N=64 training pair 3.2-3.3 ->
# 2.4 s, inference 0.73-0.77 -> 0.67-0.76 s. Both halves ran about 12% slower side by side,
# and on a machine whose other core was busy the earlier measurement of the same overlap lost
# (4.3-4.5 -> 4.5-4.7 s for the training pair). A primitive's creation still ends with its
# kernels built, as oneDNN's does: leaving the waiting to the first execution would let the
# backward primitive's generation overlap the forward's last builds too (training pair
# 2.52-2.70 -> 2.40-2.50 s), but move build errors and their time into execute.
_deferred = threading.local()


def _outstanding() -> list[Kernel]:
    """The kernels this thread asked for outside :func:`deferred_builds` whose compilation
    nobody has waited for yet."""
    out = getattr(_deferred, "outstanding", None)
    if out is None:
        out = _deferred.outstanding = []
    return out


def finish_pending() -> None:
    """Wait for every compilation this thread's :func:`get_kernel` calls started outside
    :func:`deferred_builds` (a primitive's creation ends with it, so that its kernels,
    its descriptor's included, are built when it returns); raises the first failure."""
    out = _outstanding()
    kernels = [k for k in out if not k.reported]
    out.clear()
    finish_builds(kernels)


@contextmanager
def deferred_builds(wait: bool = True):
    """Scopes the waiting for compilations (:func:`get_kernel` always returns while its
    kernel compiles): yields the list of kernels asked for inside, which
    :func:`finish_pending` then leaves alone. Leaving waits for every compilation started
    inside and raises the first failure; with ``wait=False`` it leaves them running, and the
    caller finishes them with :func:`finish_builds` (a launch would wait for its own
    build)."""
    outer = getattr(_deferred, "kernels", None)
    mine: list[Kernel] = []
    _deferred.kernels = mine
    try:
        yield mine
    except BaseException:
        _finish(mine, raise_first=False)
        raise
    else:
        if wait:
            finish_builds(mine)
    finally:
        _deferred.kernels = outer


def finish_builds(kernels) -> None:
    """Wait for the compilation of each of ``kernels``; raises the first that failed."""
    _finish(kernels, raise_first=True)


def _finish(kernels, raise_first: bool) -> None:
    error = None
    for k in kernels:
        try:
            k.wait()
        except Exception as e:  # every build is waited for; the first error wins
            error = error or e
    if error is not None and raise_first:
        raise error
