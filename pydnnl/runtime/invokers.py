"""pyopencl's kernel invokers, looked up once per process.

Creating a ``cl.Kernel`` makes pyopencl fetch that kernel's Python argument invoker from its
on-disk cache: a sqlite read, an unpickling and a compilation of Python code, about 0.3 ms
per kernel on a 2-core EPYC, every time. Plans create a ``cl.Kernel`` per launch step (each
holds its own arguments: :class:`~pydnnl.runtime.kernel.BoundKernel`) and never call the
invoker (they set arguments and enqueue directly), so an RNN's first execution spent 30 ms
on them and oneDNN's RNN CI list 47 of its 248 s. :func:`memoize` keeps each invoker in
memory under pyopencl's own key after its first lookup. pyopencl versions without that
function are left alone.
"""
from __future__ import annotations

import threading

_lock = threading.Lock()
_done = False


def memoize() -> None:
    """Wrap pyopencl's invoker lookup with an in-process memo (once per process)."""
    global _done
    if _done:
        return
    with _lock:
        if _done:
            return
        _done = True
        try:
            from pyopencl import invoker
        except ImportError:
            return
        fetch = getattr(invoker, "generate_enqueue_and_set_args", None)
        if fetch is None:
            return
        memo: dict = {}

        def cached(function_name, num_passed_args, num_cl_args, arg_types,
                   work_around_arg_count_bug, warn_about_arg_count_bug, devs):
            key = (function_name, num_passed_args, num_cl_args, arg_types,
                   work_around_arg_count_bug, warn_about_arg_count_bug, tuple(devs))
            out = memo.get(key)
            if out is None:
                out = memo[key] = fetch(function_name, num_passed_args, num_cl_args,
                                        arg_types, work_around_arg_count_bug,
                                        warn_about_arg_count_bug, devs)
            return out

        invoker.generate_enqueue_and_set_args = cached
