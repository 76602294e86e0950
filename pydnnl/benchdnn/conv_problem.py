"""benchdnn's convolution problem descriptors: parsing, deduction, printing and batch files.

Descriptor syntax (``tests/benchdnn/doc/driver_conv.md``, ``knobs_desc.md``)::

    gXmbX_icXidXihXiwX_ocXodXohXowX_kdXkhXkwX_sdXshXswX_pdXphXpwX_ddXdhXdwX_nNAME

``_`` separators are ignored; ``n`` starts the name, which runs to the end of the descriptor
(one pair of enclosing double quotes is removed). The rules follow benchdnn's ``str2desc``:

* defaults: ``mb = 2``, ``g = 1`` (a ``g`` written explicitly, even ``g1``, makes the weights
  grouped: ``[G, OC/G, IC/G, k...]``), strides 1, dilation 0 (oneDNN: 0 = dense);
* ``ic``, ``oc`` and, for every spatial dim used, its input size and kernel are mandatory;
* a spatial dim is used when any of its input, kernel, output or dilation is given, its stride
  is not 1 or its padding is not 0;
* a missing output size is computed with symmetric padding (0 if not given):
  ``o = (i - ((k-1)*(d+1)+1) + 2p) / s + 1``; a missing padding with a given output size is
  ``p = ((o-1)*s - i + ((k-1)*(d+1)+1)) / 2`` (C integer division, truncating toward zero);
* the right padding is whatever makes the sizes consistent:
  ``p_r = (o-1)*s - i + ((k-1)*(d+1)+1) - p`` (it can be negative, which crops the input);
* the problem is 3-D if depth is used, else 2-D if height is used, else 1-D (width only).
  Missing lower dims are copied from the highest one given (``ih`` only is square, ``id``
  only is cubic); dims above the problem's rank take size 1, kernel 1, stride 1, padding 0.

The number of operations (:meth:`ConvProblem.flops`) is benchdnn's: ``2 * mb * oc * ic / g``
times the number of (output point, kernel tap) pairs that land inside the input, so padding
taps do not count.

Deconvolution problems (``--deconv``, ``parse_conv_problem(desc, deconv=True)``) use the same
syntax with benchdnn's deconv rules: the sizes relate as in the transposed convolution,
``o = (i-1)*s + ((k-1)*(d+1)+1) - 2p``, a missing padding is
``p = ((i-1)*s - o + ((k-1)*(d+1)+1)) / 2`` and ``p_r = (i-1)*s - o + ((k-1)*(d+1)+1) - p``;
the operation count is that of the convolution whose backward data the deconvolution is.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from ..conv_shapes import ConvGeometry, kernel_extent
from ..error import invalid_arguments
from .inputs import _split, _strip_comment

__all__ = ["ConvProblem", "parse_conv_problem", "read_batch", "parse_batch_text"]

_KEYS = ("g", "mb", "ic", "id", "ih", "iw", "oc", "od", "oh", "ow", "kd", "kh", "kw",
         "sd", "sh", "sw", "pd", "ph", "pw", "dd", "dh", "dw")
_TOKEN = re.compile(r"(g|mb|ic|id|ih|iw|oc|od|oh|ow|kd|kh|kw|sd|sh|sw|pd|ph|pw|dd|dh|dw)"
                    r"([+-]?\d+)?")


def _c_div(a: int, b: int) -> int:
    """C integer division (truncation toward zero), as benchdnn computes."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


# benchdnn's per-dim names: a quantity letter and an axis (``ih``, ``kw``, ``pd_r``...)
_DIM_NAME = re.compile(r"([ioksd][dhw])|(p[dhw])(_r)?")
_VIEWS = {"i": "src_spatial", "o": "dst_spatial", "k": "kernel", "s": "strides",
          "d": "dilates", "p": "padding_l", "p_r": "padding_r"}
# what a dim above the problem's rank holds
_UNUSED = {"i": 1, "o": 1, "k": 1, "s": 1, "p": 0, "p_r": 0, "d": 0}


@dataclass(frozen=True)
class ConvProblem(ConvGeometry):
    """One benchdnn convolution problem (benchdnn's ``desc_t``): a :class:`ConvGeometry` (its
    ``grouped_weights`` set when ``g`` was written) with a name.

    benchdnn's per-dim names read the geometry for depth, height and width whatever the rank
    (``p.ih``, ``p.kw``; ``pd/ph/pw`` the left paddings, ``pd_r/ph_r/pw_r`` the right ones):
    dims above ``ndims`` hold size 1, kernel 1, stride 1, padding 0, dilation 0. Dilations use
    oneDNN's convention (0 = dense).
    """

    name: str = ""

    # --- construction -------------------------------------------------------------------
    @classmethod
    def parse(cls, desc: str) -> ConvProblem:
        """Parse a benchdnn conv descriptor (see the module docstring)."""
        return parse_conv_problem(desc)

    def with_mb(self, mb: int) -> ConvProblem:
        """The same problem with another minibatch (benchdnn's ``--mb`` override; 0 keeps it)."""
        if mb == 0:
            return self
        if mb < 0:
            raise invalid_arguments(f"ConvProblem.with_mb: mb must be >= 0, got {mb}")
        return replace(self, mb=int(mb))

    # --- benchdnn's names -----------------------------------------------------------------
    @property
    def g(self) -> int:
        return self.groups

    @property
    def has_groups(self) -> bool:
        return self.grouped_weights

    def _dhw(self, what: str) -> tuple[int, int, int]:
        """Quantity ``what`` (a key of ``_VIEWS``) for (depth, height, width)."""
        vals = tuple(getattr(self, _VIEWS[what]))
        return (_UNUSED[what],) * (3 - len(vals)) + vals

    def __getattr__(self, name: str) -> int:
        m = _DIM_NAME.fullmatch(name)
        if m is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        what = name[0] + (m.group(3) or "")
        return self._dhw(what)["dhw".index(name[1])]

    @property
    def repeats(self) -> int:
        """How many times the layer occurs in its network: the ``*N`` suffix of the name
        (benchdnn's shape files write ``n"resnet_50:res2a_branch2b*3"``), else 1."""
        m = re.search(r"\*(\d+)$", self.name)
        return int(m.group(1)) if m else 1

    # --- work -------------------------------------------------------------------------------
    def flops(self) -> float:
        """benchdnn's operation count: 2 * mb * oc * ic/g * (output, tap) pairs inside the input
        (a deconvolution counts its equivalent convolution's pairs)."""
        taps = 1
        c = self.as_convolution()
        for i, o, k, s, p, d in zip(c.src_spatial, c.dst_spatial, c.kernel, c.strides,
                                    c.padding_l, c.dilates):
            pos = np.arange(o)[:, None] * s - p + np.arange(k)[None, :] * (d + 1)
            taps *= int(np.count_nonzero((pos >= 0) & (pos < i)))
        return float(2 * self.mb * self.oc * (self.ic // self.g) * taps)

    # --- printing ---------------------------------------------------------------------------
    def to_str(self, canonical: bool = False) -> str:
        """The descriptor as benchdnn prints it (short form unless ``canonical``);
        ``parse(p.to_str()) == p``."""
        o, i, k, s, p, d = (self._dhw(w) for w in "oikspd")
        groups = list(zip(o, i, k, s, p, d))          # per dim (d, h, w)
        square = groups[1] == groups[2]
        cubic = square and groups[0] == groups[1]
        nd = self.ndims
        print_d = nd == 5
        print_h = nd == 4 or (nd == 5 and (not cubic or canonical))
        print_w = nd == 3 or (nd == 5 and (not cubic or canonical)) or \
            (nd == 4 and (not square or canonical))

        def sp(prefix: str, vals: tuple[int, int, int]) -> str:
            out = ""
            for flag, axis, v in zip((print_d, print_h, print_w), "dhw", vals):
                if flag:
                    out += f"{prefix}{axis}{v}"
            return out

        parts = []
        if canonical or self.has_groups:
            parts.append(f"g{self.g}")
        if canonical or self.mb != 2:
            parts.append(f"mb{self.mb}")
        parts.append(f"ic{self.ic}" + sp("i", i))
        parts.append(f"oc{self.oc}" + sp("o", o))
        parts.append(sp("k", k))
        if canonical or any(v != 1 for v in s):
            parts.append(sp("s", s))
        parts.append(sp("p", p))
        if canonical or any(v != 0 for v in d):
            parts.append(sp("d", d))
        out = "".join(parts)
        if self.name:
            out += f'n"{self.name}"'
        return out

    __str__ = to_str


def _strip_quotes(name: str) -> str:
    name = name.strip()
    if len(name) >= 2 and name[0] == name[-1] and name[0] in "\"'":
        return name[1:-1]
    return name


def parse_conv_problem(desc: str, deconv: bool = False) -> ConvProblem:
    """Parse a benchdnn convolution (``deconv``: deconvolution) descriptor into a
    :class:`ConvProblem` (benchdnn's ``str2desc`` of that driver). Raises
    :class:`pydnnl.error.invalid_arguments` naming the bad entry."""
    if not isinstance(desc, str):
        raise invalid_arguments(f"conv problem: expected a descriptor string, got {desc!r}")
    text = desc.strip()
    if not text:
        raise invalid_arguments("conv problem: empty descriptor")
    v = dict.fromkeys(_KEYS, 0)
    v.update(g=-1, mb=2, sd=1, sh=1, sw=1, pd=-1, ph=-1, pw=-1)
    name = ""
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch == "_":
            pos += 1
            continue
        m = _TOKEN.match(text, pos)
        if m:
            key, num = m.group(1), m.group(2)
            if num is None:
                raise invalid_arguments(f"conv problem {desc!r}: no value found for `{key}` at "
                                        f"{text[pos:]!r}")
            val = int(num)
            if val < 0:
                raise invalid_arguments(f"conv problem {desc!r}: `{key}` must be non-negative, "
                                        f"got {val}")
            v[key] = val
            pos = m.end()
            continue
        if ch == "n":
            name = _strip_quotes(text[pos + 1:])
            break
        raise invalid_arguments(f"conv problem {desc!r}: unrecognized entry starting at "
                                f"{text[pos:]!r}; expected one of {', '.join(_KEYS)} followed by "
                                "a number, `_`, or n<name>")

    def need(key: str, what: str = "") -> None:
        if v[key] <= 0:
            raise invalid_arguments(f"conv problem {desc!r}: `{key}` was not specified or is 0"
                                    + (f" ({what})" if what else ""))

    has_groups = v["g"] >= 0
    if has_groups:
        need("g")
    else:
        v["g"] = 1
    need("mb")
    need("ic")
    need("oc")
    for key in ("sd", "sh", "sw"):
        need(key)

    for ax in "dhw":
        i_, o_, k_, s_, p_, d_ = (f"i{ax}", f"o{ax}", f"k{ax}", f"s{ax}", f"p{ax}", f"d{ax}")
        unused = (v[i_] | v[k_] | v[o_] | v[d_]) == 0 and v[s_] == 1 and v[p_] < 1
        if unused:
            continue
        need(i_, f"the {ax} dim is used")
        need(k_, f"the {ax} dim is used")
        ext = kernel_extent(v[k_], v[d_])
        if not v[o_]:
            if v[p_] < 0:
                v[p_] = 0
            v[o_] = ((v[i_] - 1) * v[s_] + ext - 2 * v[p_] if deconv else
                     _c_div(v[i_] - ext + 2 * v[p_], v[s_]) + 1)
            if v[o_] <= 0:
                raise invalid_arguments(
                    f"conv problem {desc!r}: `{o_}` was not specified and the other dims give "
                    f"{v[o_]} <= 0 ({i_}={v[i_]}, kernel extent {ext}, {p_}={v[p_]}, "
                    f"{s_}={v[s_]})")
        elif v[p_] < 0:
            v[p_] = (_c_div((v[i_] - 1) * v[s_] - v[o_] + ext, 2) if deconv else
                     _c_div((v[o_] - 1) * v[s_] - v[i_] + ext, 2))

    # rank and square/cubic completion (benchdnn's sanitize_desc)
    no = {ax: v[f"o{ax}"] == 0 for ax in "dhw"}
    ndims = 5 - no["d"] - (no["d"] and no["h"]) - (no["d"] and no["h"] and no["w"])
    if ndims <= 2:
        raise invalid_arguments(f"conv problem {desc!r}: at least one spatial dim (input size "
                                "and kernel, e.g. `iw` and `kw`) must be given")
    groups = ("o", "i", "k", "s", "p", "d")
    defaults = {"o": 1, "i": 1, "k": 1, "s": 1, "p": 0, "d": 0}
    if ndims == 5:
        if no["h"] and no["w"]:
            for gname in groups:
                v[f"{gname}h"] = v[f"{gname}w"] = v[f"{gname}d"]
        elif no["h"] or no["w"]:
            raise invalid_arguments(f"conv problem {desc!r}: a 3-D problem needs either all of "
                                    "its `h` and `w` dims or none of them")
    elif ndims == 4 and no["w"]:
        for gname in groups:
            v[f"{gname}w"] = v[f"{gname}h"]
    for gname in groups:
        if ndims < 5:
            v[f"{gname}d"] = defaults[gname]
        if ndims < 4:
            v[f"{gname}h"] = defaults[gname]

    if v["ic"] % v["g"] or v["oc"] % v["g"]:
        raise invalid_arguments(f"conv problem {desc!r}: ic={v['ic']} and oc={v['oc']} must be "
                                f"divisible by g={v['g']}")
    nsp = ndims - 2

    def dims(what: str) -> tuple[int, ...]:
        return tuple(v[f"{what}{ax}"] for ax in "dhw")[3 - nsp:]

    # the side whose size the stride divides: the input of a convolution, the output of a
    # deconvolution (the input of the convolution it transposes)
    pad_r = tuple(((i - 1) * s - o if deconv else (o - 1) * s - i) + kernel_extent(k, d) - p
                  for i, o, k, s, p, d in zip(*(dims(w) for w in "iokspd")))
    return ConvProblem(v["mb"], v["g"], v["ic"], v["oc"], dims("i"), dims("o"), dims("k"),
                       dims("s"), dims("d"), dims("p"), pad_r, deconvolution=deconv,
                       grouped_weights=has_groups, name=name)


# ---------------------------------------------------------------------------------------------
# batch files
# ---------------------------------------------------------------------------------------------
def _option_key(tok: str) -> str:
    return tok.split("=", 1)[0]


def _iter_batch(text: str, base_dir: str | None, options: dict[str, str], source: str,
                depth: int) -> Iterator[tuple[tuple[str, ...], ConvProblem]]:
    if depth > 16:
        raise invalid_arguments(f"read_batch: --batch nesting deeper than 16 at {source}")
    for lineno, raw in enumerate(text.splitlines(), 1):
        for tok in _split(_strip_comment(raw)):
            if tok.startswith("-"):
                key = _option_key(tok)
                if key == "--reset":
                    options.clear()
                elif key == "--batch":
                    fname = tok.split("=", 1)[1] if "=" in tok else ""
                    if not fname:
                        raise invalid_arguments(f"read_batch: {source}:{lineno}: --batch needs a "
                                                "file name (--batch=FILE)")
                    path = fname if os.path.isabs(fname) or base_dir is None else \
                        os.path.join(base_dir, fname)
                    with open(path, encoding="utf-8") as f:
                        sub = f.read()
                    # a nested batch starts from the current options; its changes stay inside
                    yield from _iter_batch(sub, os.path.dirname(path), dict(options), path,
                                           depth + 1)
                else:
                    options[key] = tok
                continue
            try:
                prb = parse_conv_problem(tok)
            except invalid_arguments as e:
                raise invalid_arguments(f"read_batch: {source}:{lineno}: {e}") from None
            yield tuple(options.values()), prb


def parse_batch_text(text: str, base_dir: str | None = None, source: str = "<text>"
                     ) -> list[tuple[tuple[str, ...], ConvProblem]]:
    """Problems of a batch text, each with the ``--options`` in effect where it appears."""
    return list(_iter_batch(text, base_dir, {}, source, 0))


def read_batch(path: str | os.PathLike) -> list[tuple[tuple[str, ...], ConvProblem]]:
    """Read a benchdnn problem-list file: one or more problems or ``--options`` per line,
    ``#`` comments. Returns ``(options, problem)`` pairs, ``options`` being the option tokens in
    effect (e.g. ``("--dir=BWD_D", "--mb=1")``; a later ``--key=`` replaces an earlier one,
    ``--reset`` clears them, ``--batch=FILE`` includes FILE relative to this file)."""
    path = os.fspath(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return parse_batch_text(text, os.path.dirname(path), path)

