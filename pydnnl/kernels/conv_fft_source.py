"""The FFT convolution's line passes as OpenCL source, written without loopy.

:func:`fft_pass_source` prints the straight-line program of :func:`~.conv_fft.fft_program`
(the one loopy's kernel is made of: the same temporaries, expressions and stores in the same
order, so the same arithmetic) as a :class:`KernelSource` with loopy's kernel name, argument
names and order, work-group size and launch grid. A pass holds hundreds of temporaries,
which loopy takes 2-3 s to schedule and print; a first-ever FFT convolution asked for 3-9 of
them. ``tests/kernels/test_conv_fft_source.py`` runs both kernels on random data and compares.

Covered: every pass without post-ops (any source, destination and layout; a bias); passes
with post-ops return None and go to loopy.
"""
from __future__ import annotations

from .clhelpers import c_mapper
from .conv_fft import FftPass, fft_program
from .printing import float_ptr, indent, kernel_head, peeled
from .source import KernelSource

_PRELUDE = ("#define lid(N) ((long) get_local_id(N))\n"
            "#define gid(N) ((long) get_group_id(N))\n")


def _mapper():
    """C of the program's expressions: index arithmetic in 64 bits (``f``, the offsets and
    every integer constant too large for an int are longs), float constants as floats."""
    base = c_mapper()

    class _M(type(base)):
        def map_constant(self, x, enclosing_prec):
            if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 2 ** 31:
                return f"{x}L"
            return super().map_constant(x, enclosing_prec)

    return _M()


def _line_indices(prog, lines: tuple, wg: int, c) -> str:
    """C of the work-item's line indices, once each. Where the work-groups tile the last
    line dimension, its index is the local id plus a group's offset and the others come from
    the group id alone, so that neighbouring work-items visibly read neighbouring addresses
    (a CPU compiler then loads them as one vector; the same indices taken apart from the
    flat id with divisions made the first pass 1.6x slower than loopy's, whose index
    simplification finds this form); elsewhere they are divided out of the flat id in 32
    bits."""
    from pymbolic import var

    from .conv_common import decompose

    if lines and lines[-1] % wg == 0:
        per = lines[-1] // wg
        group = "gid(0)" if per == 1 else f"(gid(0) / {per})"
        last = "lid(0)" if per == 1 else f"(gid(0) % {per}) * {wg} + lid(0)"
        out = f"long const pd_grp = {group};\n"
        outer = decompose(var("pd_grp"), list(lines[:-1])) if len(lines) > 1 else []
        for (name, _), e in zip(prog.lines[:-1], outer):
            out += f"long const {name} = {c(e)};\n"
        return out + f"long const {prog.lines[-1][0]} = {last};\n"
    out = f"int const f = (int) (gid(0) * {wg} + lid(0));\n"
    for name, expr in prog.lines:
        out += f"long const {name} = {c(expr)};\n"
    return out


def fft_pass_source(p: FftPass) -> KernelSource | None:
    """The kernel of pass ``p``, or None where it has post-ops (loopy)."""
    if p.post_ops:
        return None
    prog = fft_program(p, named_lines=p.lid_lines)
    if prog.total >= 2 ** 31:
        return None
    c = _mapper()
    params = []
    for spec in prog.specs:
        name, n = spec[0], spec[1]
        if n is None:
            params.append(f"long const {name}")
        else:
            params.append(float_ptr(name, const=not spec[2]))
    wg = max(1, min(p.wg, prog.total))
    # GPUs: the flat id taken apart in each address (the H200 ran the passes 3-19% slower
    # with the CPUs' form below)
    body = (_line_indices(prog, p.lines, wg, c) if p.lid_lines
            else f"long const f = gid(0) * {wg} + lid(0);\n")
    for name, expr in prog.temps:
        body += f"float const {name} = {c(expr)};\n"
    for at, value in prog.stores:
        body += f"{c(at)} = {c(value)};\n"
    # a partial last work-group in code of its own guarded by the local id alone (loopy's
    # peeled slab: Intel's compiler drops the guard of a loop-free kernel's constant size)
    code = indent(peeled(body, prog.total, wg))
    groups = -(-prog.total // wg)
    source = _PRELUDE + "\n" + kernel_head(prog.name, (wg,), params) + code + "}\n"
    return KernelSource(prog.name, source, (groups * wg,), (wg,),
                        tuple(spec[0] for spec in prog.specs))


__all__ = ["fft_pass_source"]
