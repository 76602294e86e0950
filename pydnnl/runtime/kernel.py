"""Built kernels and the launch protocol every plan step follows.

A :class:`Kernel` is an OpenCL program built from a :class:`~pydnnl.kernels.source.KernelSource`
for one device. A plan step becomes a :class:`BoundKernel` once: its own ``cl.Kernel`` with
the constant arguments set, and placeholders (objects with a ``key``) resolved per launch from
the execute-time buffers.
"""
from __future__ import annotations

import os
import threading
import time

from ..engine import _cl
from ..error import runtime_error
from ..kernels.source import KernelSource, launch_size, local_launch_size, scalar_types
from .invokers import memoize as memoize_invokers


class Kernel:
    """A built OpenCL kernel: ``kernel(stream, buf_a, buf_b, ...)``. Its launch size is fixed,
    or computed from the runtime size arguments of each call (see ``KernelSource.grid``)."""

    def __init__(self, context, device, src: KernelSource, binary_path=None,
                 defer: bool = False):
        """``binary_path``: where the program binary for this device is kept (see
        :mod:`pydnnl.runtime.kernel_cache`): read instead of compiling when it is there,
        written after a compilation when it is not. None compiles (pyopencl may cache).
        A compilation runs on the build thread (:func:`warm_up`); ``defer`` returns while
        it runs: :attr:`program` and :meth:`wait` finish it (and raise its error)."""
        self.src = src
        self.name = src.name
        self.scalar_types = scalar_types(src)  # numpy type per scalar argument, else None
        #: the kernel's name in its program (another where a merged program renamed it)
        self.cl_name = src.name
        self._program = None
        if binary_path:
            self._program = _from_binary(context, device, src, binary_path)
            if self._program is None:
                self._program, self.cl_name = _from_merged(context, device, src, binary_path)
        #: "binary" (read from the kernel cache) or "source" (compiled here)
        self.built_from = "source" if self._program is None else "binary"
        self._pending = None
        if self._program is None:
            self._pending = _compile(context, device, src, binary_path)
            if not defer:
                self.wait()

    #: whether a failed compilation has been raised to a caller of :meth:`wait` (the kernel
    #: cache then leaves it out of later waits: e.g. a tuning candidate that does not build)
    reported = False

    def wait(self) -> None:
        """Finish the compilation (a no-op once built); raises its ``runtime_error``."""
        pending = self._pending
        if pending is not None:
            if not pending.done():
                _flush()  # the build thread need gather no more requests
            try:
                built = pending.result()
            except BaseException:
                self.reported = True
                raise
            self._program, self.cl_name = built.program, built.cl_name
            self._pending = None

    @property
    def built(self) -> bool:
        """Whether the program is there (compiled or loaded, waited for or not)."""
        p = self._pending
        return p is None or (p.done() and p.exception() is None)

    @property
    def failed(self) -> bool:
        """Whether the compilation has ended in an error (which :meth:`wait` raises)."""
        p = self._pending
        return p is not None and p.done() and p.exception() is not None

    @property
    def program(self):
        """The built ``cl.Program`` (waits for a compilation still running)."""
        self.wait()
        return self._program

    @property
    def kernel(self):
        """The program's kernel with pyopencl's argument invoker, made on first use: plans
        launch their own ``cl.Kernel`` (:class:`BoundKernel`), and the invoker's first
        generation in a process cost 30-40 ms of a fresh process's first creation."""
        k = self.__dict__.get("_kernel")
        if k is None:
            program = self.program
            # (a kernel of its own: Kernels sharing one program by text each set their
            # arguments; getattr on the program would warn of every retrieval after the first)
            memoize_invokers()
            k = self.__dict__["_kernel"] = _cl().Kernel(program, self.cl_name)
        return k

    def __call__(self, stream, *args, wait_for=None):
        """Enqueue on ``stream`` (a ``pydnnl.stream``); args in the kernel's argument order."""
        cl = _cl()
        self.kernel.set_args(*args)
        gsize = launch_size(self.src, args)
        evt = cl.enqueue_nd_range_kernel(stream.queue, self.kernel, gsize,
                                         local_launch_size(self.src, args), wait_for=wait_for)
        stream.record(self.name, evt, gsize)
        return evt

    def bound(self, args) -> "BoundKernel":
        """A private copy of the kernel with ``args`` set once; see :class:`BoundKernel`."""
        return BoundKernel(self, args)


# -- compilation -----------------------------------------------------------------------------
# Every compilation from source runs on one thread. An OpenCL compiler's first build on a
# thread pays its set-up there (Intel's CPU runtime: 100-200 ms, again on each new thread),
# so one long-lived thread pays it once, and it can pay it early (:func:`warm_up`) while the
# caller's thread generates the first kernel. Intel's runtime runs one build at a time, so
# more threads would not compile faster (three at once took longer than one after the other;
# LSTM 512's GEMM on one thread and its two small kernels on a second, both warmed up: the
# second thread's first build waited for the GEMM's, 0.25-0.28 s in all against 0.30-0.32 s
# on one thread, before the second thread's own compiler set-up of 0.1-0.2 s).
_THREAD = None
_THREAD_LOCK = threading.Lock()
# warnings.catch_warnings swaps process-wide state: this module's uses take turns
_WARNINGS_LOCK = threading.Lock()
_warmed: set = set()
_costs = {"programs_built": 0, "build_ms": 0.0, "compiler_start_ms": 0.0, "programs_loaded": 0,
          "programs_merged": 0, "merges_failed": 0}


def build_costs() -> dict:
    """Compilations from source (count, ms) and compiler set-ups (ms) of this process, and
    the programs loaded from cached binaries (see ``kernel_cache.creation_costs``);
    ``programs_merged``: the sources compiled inside merged programs (each merged program
    counts once in ``programs_built``), ``merges_failed``: merged builds that failed and
    were built one by one instead."""
    with _THREAD_LOCK:
        return dict(_costs)


def _count(name: str, value) -> None:
    with _THREAD_LOCK:
        _costs[name] += value


_WARM_UP_SOURCE = "__kernel void pydnnl_warm_up(__global int *x) { x[0] = 0; }"


def _build_thread():
    global _THREAD
    with _THREAD_LOCK:
        if _THREAD is None:
            from concurrent.futures import ThreadPoolExecutor

            _THREAD = ThreadPoolExecutor(1, thread_name_prefix="pydnnl-build")
        return _THREAD


def _after_fork_in_child() -> None:
    # a forked child has none of its parent's threads: it starts its own build thread
    global _THREAD, _THREAD_LOCK, _WARNINGS_LOCK, _FLUSH
    _THREAD, _THREAD_LOCK, _WARNINGS_LOCK = None, threading.Lock(), threading.Lock()
    _FLUSH = threading.Event()
    _warmed.clear()
    _PROGRAMS.clear()  # futures of the parent's thread
    _QUEUE.clear()
    _MERGED.clear()


def _before_fork() -> None:
    # a child would wait forever for a compilation its parent's build thread was running:
    # the parent finishes its queue first (the thread runs one job at a time, in order)
    t = _THREAD
    if t is not None and not threading.current_thread().name.startswith("pydnnl-build"):
        try:
            t.submit(int).result()
        except RuntimeError:  # shut down at interpreter exit
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def warm_up(context, device) -> None:
    """Start the OpenCL compiler for ``device`` on the build thread (once per context and
    device), for a caller about to generate a kernel it will compile: the compiler's set-up
    then runs beside the generation instead of before the first compilation."""
    key = (context.int_ptr, device.int_ptr)
    with _THREAD_LOCK:
        if key in _warmed:
            return
        _warmed.add(key)
    src = KernelSource("pydnnl_warm_up", _WARM_UP_SOURCE, (1,), (1,), ("x",))
    _build_thread().submit(_from_source, context, device, src, None, True)


class _Built:
    """A compilation's result: the program and the kernel's name in it."""

    __slots__ = ("program", "cl_name", "merged", "merged_path")

    def __init__(self, program, cl_name: str, merged: bool = False, merged_path=None):
        self.program, self.cl_name, self.merged = program, cl_name, merged
        self.merged_path = merged_path  # where the merged program's binary was stored


# Compilations asked for and not yet started: the build thread takes all of them at once
# and compiles those that share a context, a device and build options as ONE program
# (:mod:`pydnnl.runtime.program_merge`), falling back to one program per source where the
# merged build fails. Measured on the 2-core AVX-512 Xeon: see the commit that added it.
_QUEUE: list = []

# The build thread gathers requests before it compiles them (:func:`_gather`): a creation's
# kernels arrive a few milliseconds apart (printed generators take well under one), and the
# first one used to find the thread idle and be compiled alone, paying a program's fixed cost
# again (Intel's CPU compiler: 25-35 ms a program besides its kernels) and leaving the rest
# to a second program. It starts once no request has come for ``_QUIET_S`` (the caller is
# doing something else: a loopy generation, tuning), once someone waits for a compilation
# (:meth:`Kernel.wait`: a creation's end, a kernel's first use) or after ``_HOLD_S`` in all.
# GRU 512 T=50 N=64 training pair on the 2-core AVX-512 Xeon: the backward's first GEMM was
# built alone (90 ms), then its 14 other kernels (550 ms); first-ever creation 1005-1028 ->
# 993-997 ms with a 10 ms window (load 0.1-0.25). Its requests come 1-2 ms apart on a
# quiet machine, but on one loaded by other jobs (load 4 on the 2 cores) a 10 ms window
# still split a creation's kernels into two programs once in three: 25 ms. A creation's
# end waits for its kernels, which starts the build at once.
_QUIET_S = 0.025
_HOLD_S = 0.100
_LAST_REQUEST = [0.0]
_FLUSH = threading.Event()


def _flush() -> None:
    """Tell the build thread to compile what it has gathered now (a signal only while
    requests wait: the drain that takes them clears it, so none is left for later ones)."""
    with _THREAD_LOCK:
        if _QUEUE:
            _FLUSH.set()


def _gather() -> None:
    """On the build thread: wait while requests keep arriving (see ``_QUIET_S``)."""
    start = time.perf_counter()
    while not _FLUSH.is_set():
        with _THREAD_LOCK:
            if not _QUEUE:
                return
            last = _LAST_REQUEST[0]
        now = time.perf_counter()
        left = min(last + _QUIET_S, start + _HOLD_S) - now
        if left <= 0:
            return
        _FLUSH.wait(left)


def merging_enabled() -> bool:
    """Whether queued compilations are merged (``PYDNNL_MERGE_BUILDS=0`` turns it off)."""
    return os.environ.get("PYDNNL_MERGE_BUILDS", "1") != "0"


# Programs compiled from source in this process, by context, device, source and options:
# kernels whose generated sources are equal (keys that differ only in what the source does
# not show, such as launch sizes: two of GRU 512's three B packers) share one compilation.
_PROGRAMS: dict = {}


def _compile(context, device, src: KernelSource, binary_path):
    """The future of ``src``'s program on the build thread: a compilation, or the one of an
    equal source already asked for (its binary then also stored at ``binary_path``)."""
    key = (context.int_ptr, device.int_ptr, src.source, src.build_options)
    with _THREAD_LOCK:
        shared = _PROGRAMS.get(key)
        if shared is not None and shared.done() and shared.exception() is not None:
            shared = None  # a failed build is tried again
    thread = _build_thread()
    if shared is None:
        from concurrent.futures import Future

        fut = Future()
        fut.pydnnl_name = src.name  # the kernel the first request launches
        with _THREAD_LOCK:
            _PROGRAMS[key] = fut
            _QUEUE.append((context, device, src, binary_path, fut))
            _LAST_REQUEST[0] = time.perf_counter()
        thread.submit(_drain)
        return fut
    return thread.submit(_shared_program, shared, binary_path, src.name)


def _shared_program(shared, binary_path, name: str):
    # runs on the build thread after the compilation it shares (one thread, jobs in order:
    # the _drain job submitted after the shared request has taken it)
    built = shared.result()
    if name != shared.pydnnl_name:
        # an equal source asked for under another of its kernels (dropout's forward and
        # backward share one text): that kernel, under its own name (a merge renames only
        # the kernel each request names)
        built = _Built(built.program, name, built.merged, built.merged_path)
    if binary_path is not None:
        if built.merged_path is not None:
            _store_link(binary_path, built.merged_path, built.cl_name)
        elif not built.merged:  # (a merged program's binary is only kept under its own key)
            _store_binary(built.program, binary_path)
    return built


def _drain() -> None:
    """On the build thread: compile every queued request (merged where several share a
    context, a device and build options), settling each one's future."""
    if merging_enabled():
        _gather()
    with _THREAD_LOCK:
        reqs = list(_QUEUE)
        _QUEUE.clear()
        _FLUSH.clear()
    groups: dict = {}
    for r in reqs:
        groups.setdefault((r[0].int_ptr, r[1].int_ptr, r[2].build_options), []).append(r)
    for group in groups.values():
        if len(group) > 1 and merging_enabled():
            try:
                _build_merged(group)
            except BaseException:  # (not expected) nobody may wait forever: build apart
                _count("merges_failed", 1)
                for r in group:
                    if not r[4].done():
                        _build_one(r)
        else:
            for r in group:
                _build_one(r)


def _build_one(req) -> None:
    context, device, src, binary_path, fut = req
    try:
        program = _from_source(context, device, src, binary_path)
    except BaseException as e:
        fut.set_exception(e)
    else:
        fut.set_result(_Built(program, src.name))


def _build_merged(group) -> None:
    """One program from the group's sources; where it fails, one program per source."""
    import hashlib

    from .program_merge import merge_sources

    context, device = group[0][0], group[0][1]
    merged = merge_sources([(r[2].name, r[2].source) for r in group])
    if merged is None:
        for r in group:
            _build_one(r)
        return
    text, names = merged
    options = group[0][2].build_options
    h = hashlib.sha256(repr((text, options)).encode()).hexdigest()[:32]
    merged_src = KernelSource(f"merged program of {len(group)} kernels "
                              f"({', '.join(r[2].name for r in group)})",
                              text, (1,), (1,), (), options)
    paths = [r[3] for r in group if r[3] is not None]
    merged_path = None
    if paths:  # beside the first binary, for the same device hash
        dev = paths[0].name.split(".")[-2]
        merged_path = paths[0].with_name(f"merged-{h}.{dev}.bin")
    try:
        program = _from_source(context, device, merged_src, merged_path)
    except Exception:
        _count("merges_failed", 1)
        for r in group:
            _build_one(r)
        return
    _count("programs_merged", len(group))
    stored = merged_path is not None and merged_path.exists()
    for r, name in zip(group, names):
        if r[3] is not None and stored:
            _store_link(r[3], merged_path, name)
        r[4].set_result(_Built(program, name, True, merged_path if stored else None))


def _from_source(context, device, src: KernelSource, binary_path, warm_up: bool = False):
    """The program compiled from ``src`` (its binary stored at ``binary_path`` when given);
    a failed build raises ``runtime_error`` (a warm-up's failure is left to the real builds)."""
    import warnings

    cl = _cl()
    t0 = time.perf_counter()
    try:
        with _WARNINGS_LOCK, warnings.catch_warnings():
            # drivers print informational build logs; pyopencl turns them into warnings
            warnings.simplefilter("ignore", cl.CompilerWarning)
            prg = cl.Program(context, src.source)
            if binary_path is not None or warm_up:  # our cache keeps the binary: not pyopencl's
                program = prg.build(options=list(src.build_options), devices=[device],
                                    cache_dir=False)
            else:
                program = prg.build(options=list(src.build_options), devices=[device])
    except cl.Error as e:
        if warm_up:
            return None
        raise runtime_error(f"kernel {src.name}: OpenCL build failed: {e}") from None
    finally:
        ms = (time.perf_counter() - t0) * 1e3
        _count("compiler_start_ms" if warm_up else "build_ms", ms)
        if not warm_up:
            _count("programs_built", 1)
    if binary_path is not None:
        _store_binary(program, binary_path)
    return program


def _from_binary(context, device, src: KernelSource, path):
    """The program built from the binary at ``path``, or None (absent, unreadable, or
    refused by the driver: the caller compiles the source again)."""
    cl = _cl()
    try:
        binary = path.read_bytes()
    except OSError:
        return None
    import warnings

    try:
        with _WARNINGS_LOCK, warnings.catch_warnings():
            warnings.simplefilter("ignore", cl.CompilerWarning)
            prg = cl.Program(context, [device], [binary])
            program = prg.build(options=list(src.build_options), devices=[device])
        _no_source(program)
        _count("programs_loaded", 1)
        return program
    except (cl.Error, RuntimeError, ValueError):
        return None


def _no_source(program) -> None:
    """Give a program made from a binary the ``_source`` attribute pyopencl's ``Kernel``
    reads: without it the read falls through to ``Program.__getattr__``, which tries to
    create a kernel of that name and fails, about 40 us per ``cl.Kernel`` (a bound launch
    creates one: an RNN's plan hundreds)."""
    if "_source" not in getattr(program, "__dict__", {"_source": None}):
        program._source = None


# merged programs loaded from the cache in this process: a second kernel of the same
# program takes the first one's
_MERGED: dict = {}


def _link_path(binary_path):
    return binary_path.with_name(binary_path.name[:-len(".bin")] + ".merged")


def _store_link(binary_path, merged_path, cl_name: str) -> None:
    """Record beside a kernel's binary path that its program is the merged one at
    ``merged_path``, under the name ``cl_name``."""
    import json

    try:
        tmp = binary_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"binary": merged_path.name, "name": cl_name}))
        tmp.replace(_link_path(binary_path))
    except OSError:
        pass


def _from_merged(context, device, src: KernelSource, binary_path):
    """``(program, kernel name)`` from the merged program a link beside ``binary_path``
    names (loaded once per process), or ``(None, src.name)``."""
    import json

    try:
        link = json.loads(_link_path(binary_path).read_text())
        merged_path = binary_path.with_name(link["binary"])
        name = link["name"]
    except (OSError, ValueError, KeyError, TypeError):
        return None, src.name
    key = (context.int_ptr, device.int_ptr, str(merged_path), src.build_options)
    with _THREAD_LOCK:
        program = _MERGED.get(key)
    if program is None:
        program = _from_binary(context, device, src, merged_path)
        if program is None:
            return None, src.name
        with _THREAD_LOCK:
            _MERGED[key] = program
    try:
        program.get_info(_cl().program_info.KERNEL_NAMES).split(";").index(name)
    except Exception:
        return None, src.name  # not the program the link was written for
    return program, name


def _store_binary(program, path) -> None:
    cl = _cl()
    try:
        binary = program.get_info(cl.program_info.BINARIES)[0]
        if not binary:
            return
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(bytes(binary))
        tmp.replace(path)
    except (OSError, cl.Error):
        pass  # a read-only cache or a driver without binaries only costs time


class BoundKernel:
    """One launch of a plan: its own ``cl.Kernel`` whose constant arguments are set once.

    ``args`` holds values (set now) and placeholders (objects with a ``key``) resolved per
    launch through a mapping; an argument is set again only when the buffer behind its
    placeholder changed. This keeps a launch at one enqueue: pyopencl's ``set_args`` costs
    tens of microseconds, which adds up over thousands of RNN steps. Runtime size arguments
    are values, never placeholders: the launch grid is computed from them once, here.
    """

    def __init__(self, kernel: Kernel, args):
        cl = _cl()
        self.kernel = kernel
        self.name = kernel.name
        program = kernel.program  # (waits for the build, which sets cl_name)
        memoize_invokers()
        self.k = cl.Kernel(program, kernel.cl_name)
        self.dyn = []
        for i, a in enumerate(args):
            if hasattr(a, "key"):
                self.dyn.append((i, a.key))
            else:
                self.k.set_arg(i, a)
        self.current = [None] * len(args)
        values = {n: v for n, v in zip(kernel.src.arg_names, args) if not hasattr(v, "key")}
        if kernel.src.grid is not None:
            self.gsize = launch_size(kernel.src, values)
        else:
            self.gsize = kernel.src.global_size
        self.lsize = local_launch_size(kernel.src, values)

    def launch(self, stream, bufs, wait_for=None):
        cl = _cl()
        for i, key in self.dyn:
            b = bufs[key]
            if self.current[i] is not b:
                self.k.set_arg(i, b)
                self.current[i] = b
        evt = cl.enqueue_nd_range_kernel(stream.queue, self.k, self.gsize, self.lsize,
                                         wait_for=wait_for)
        if stream._profiling:
            stream.record(self.name, evt, self.gsize)
        return evt
