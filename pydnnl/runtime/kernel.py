"""Built kernels and the launch protocol every plan step follows.

A :class:`Kernel` is an OpenCL program built from a :class:`~pydnnl.kernels.source.KernelSource`
for one device. A plan step becomes a :class:`BoundKernel` once: its own ``cl.Kernel`` with
the constant arguments set, and placeholders (objects with a ``key``) resolved per launch from
the execute-time buffers.
"""
from __future__ import annotations

from ..engine import _cl
from ..error import runtime_error
from ..kernels.source import KernelSource, launch_size, scalar_types


class Kernel:
    """A built OpenCL kernel: ``kernel(stream, buf_a, buf_b, ...)``. Its launch size is fixed,
    or computed from the runtime size arguments of each call (see ``KernelSource.grid``)."""

    def __init__(self, context, device, src: KernelSource, binary_path=None):
        """``binary_path``: where the program binary for this device is kept (see
        :mod:`pydnnl.runtime.kernel_cache`): read instead of compiling when it is there,
        written after a compilation when it is not. None compiles (pyopencl may cache)."""
        import warnings

        cl = _cl()
        self.src = src
        self.program = _from_binary(context, device, src, binary_path) if binary_path else None
        #: "binary" (read from the kernel cache) or "source" (compiled here)
        self.built_from = "source" if self.program is None else "binary"
        if self.program is None:
            try:
                with warnings.catch_warnings():
                    # drivers print informational build logs; pyopencl turns them into warnings
                    warnings.simplefilter("ignore", cl.CompilerWarning)
                    prg = cl.Program(context, src.source)
                    if binary_path is not None:  # our cache keeps the binary: not pyopencl's
                        self.program = prg.build(options=list(src.build_options),
                                                 devices=[device], cache_dir=False)
                        _store_binary(self.program, binary_path)
                    else:
                        self.program = prg.build(options=list(src.build_options),
                                                 devices=[device])
            except cl.Error as e:
                raise runtime_error(f"kernel {src.name}: OpenCL build failed: {e}") from None
        self.name = src.name
        self.scalar_types = scalar_types(src)  # numpy type per scalar argument, else None

    @property
    def kernel(self):
        """The program's kernel with pyopencl's argument invoker, made on first use: plans
        launch their own ``cl.Kernel`` (:class:`BoundKernel`), and the invoker's first
        generation in a process cost 30-40 ms of a fresh process's first creation."""
        k = self.__dict__.get("_kernel")
        if k is None:
            k = self.__dict__["_kernel"] = getattr(self.program, self.name)
        return k

    def __call__(self, stream, *args, wait_for=None):
        """Enqueue on ``stream`` (a ``pydnnl.stream``); args in the kernel's argument order."""
        cl = _cl()
        self.kernel.set_args(*args)
        gsize = launch_size(self.src, args)
        evt = cl.enqueue_nd_range_kernel(stream.queue, self.kernel, gsize,
                                         self.src.local_size, wait_for=wait_for)
        stream.record(self.name, evt, gsize)
        return evt

    def bound(self, args) -> "BoundKernel":
        """A private copy of the kernel with ``args`` set once; see :class:`BoundKernel`."""
        return BoundKernel(self, args)


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
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cl.CompilerWarning)
            prg = cl.Program(context, [device], [binary])
            return prg.build(options=list(src.build_options), devices=[device])
    except (cl.Error, RuntimeError, ValueError):
        return None


def _store_binary(program, path) -> None:
    import os

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
        self.k = cl.Kernel(kernel.program, kernel.name)
        self.dyn = []
        for i, a in enumerate(args):
            if hasattr(a, "key"):
                self.dyn.append((i, a.key))
            else:
                self.k.set_arg(i, a)
        self.current = [None] * len(args)
        if kernel.src.grid is not None:
            by_name = dict(zip(kernel.src.arg_names, args))
            self.gsize = launch_size(kernel.src, {n: v for n, v in by_name.items()
                                                  if not hasattr(v, "key")})
        else:
            self.gsize = kernel.src.global_size
        self.lsize = kernel.src.local_size

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
