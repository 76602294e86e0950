"""Several generated OpenCL sources as the text of one program.

Intel's CPU compiler spends tens of milliseconds on every program besides the work its
kernels take (the LSTM 512 T=50 N=64 training pair's 9 sources: 852-874 ms built one by one,
515-588 ms as one program), so the build thread compiles the sources that wait for it
together (:mod:`pydnnl.runtime.kernel`). Pure text work: nothing here touches a device.

Each source keeps its meaning inside the merged text:

- its kernel is renamed where an earlier source's kernel has the same name
  (``gemm``, ``gemm__pd1``, ...): the caller launches the name :func:`merge_sources` returns;
- every macro a source defines is ``#undef``-ed after it, so the next source sees none of
  them (loopy's ``lid``/``gid`` are ``int`` in one source and ``long`` in the next);
- a preamble (the text before the first ``__kernel``) whose helpers (all but its one-line
  ``#define`` and ``#pragma`` lines) equal those of one already in the program, leaving no
  macro of their own defined, keeps only those lines the second time (loopy's floor
  division helpers); a helper function that two kept preambles both define would fail the
  merged build, so :func:`merge_sources` declines such sources (None) and the caller builds
  them one by one without that failed build (a failed build also shows as an error under
  Oclgrind); anything else that two sources both define (types) makes the merged build
  fail, and the caller then builds the sources one by one.
"""
from __future__ import annotations

import re

_KERNEL_LINE = re.compile(r"^[ \t]*__kernel\b", re.M)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", re.M)
_UNDEF = re.compile(r"^[ \t]*#[ \t]*undef[ \t]+(\w+)", re.M)
# a function definition outside macros: its name, then a parameter list, then its body
_FUNCTION = re.compile(r"^[^#\n]*?\b(\w+)\s*\([^;{}]*\)\s*\{", re.M)


def _kernel_pattern(name: str):
    # the kernel's definition: "__kernel" then anything but a body or a statement end
    # (attributes with parentheses included), then the name and its parameter list
    return re.compile(r"(__kernel\b[^;{]*?)\b" + re.escape(name) + r"(\s*\()")


def _split_preamble(preamble: str) -> tuple[str, str]:
    """The one-line ``#define`` and ``#pragma`` lines of a preamble, and the rest."""
    simple, rest = [], []
    lines = preamble.splitlines(keepends=True)
    cont = False
    for line in lines:
        st = line.strip()
        one_line = (not cont and st.startswith("#") and not st.endswith("\\")
                    and re.match(r"#\s*(define|pragma)\b", st) is not None)
        (simple if one_line else rest).append(line)
        cont = st.endswith("\\")
    return "".join(simple), "".join(rest)


def merge_sources(sources) -> tuple[str, list[str]] | None:
    """``(text, kernel names)`` of one program holding the kernels ``sources`` define
    (pairs of kernel name and OpenCL source), the i-th source's kernel under the i-th name;
    None where a kernel's definition cannot be found exactly once to rename it."""
    parts: list[str] = []
    names: list[str] = []
    seen_names: set[str] = set()
    seen_preambles: set[str] = set()
    seen_functions: set[str] = set()
    for i, (name, text) in enumerate(sources):
        new = name
        if new in seen_names:
            new = f"{name}__pd{i}"
            while new in seen_names:
                new += "_"
        pat = _kernel_pattern(name)
        if len(pat.findall(text)) != 1:
            return None
        if new != name:
            text = pat.sub(lambda m, new=new: m.group(1) + new + m.group(2), text, count=1)
        seen_names.add(new)
        names.append(new)
        m = _KERNEL_LINE.search(text)
        cut = m.start() if m else 0
        preamble, body = text[:cut], text[cut:]
        simple, helpers = _split_preamble(preamble)
        if helpers.strip():
            open_macros = set(_DEFINE.findall(helpers)) - set(_UNDEF.findall(helpers))
            if not open_macros and helpers in seen_preambles:
                preamble = simple  # the same helpers are already in the program
            else:
                seen_preambles.add(helpers)
                functions = set(_FUNCTION.findall(helpers))
                if functions & seen_functions:
                    return None  # a function defined twice: the merged build would fail
                seen_functions |= functions
        defined = sorted(set(_DEFINE.findall(text)))
        undefs = "".join(f"#undef {d}\n" for d in defined)
        parts.append(f"/* pydnnl merged program: part {i}, kernel {new} */\n"
                     f"{preamble}{body}\n{undefs}")
    return "\n".join(parts), names
