"""Row gather through an index table: how variable-length RNN plans sort, pack and unpack
sequences on the device.

``dst[d_off + r * dst_ld + c] = (idx[i_off + r] >= 0 ? src[s_off + idx[i_off + r] * src_ld + c]
: 0) (+ dst[...] when accumulating)`` for ``r < nrows``, ``c < width``. The index tables are
int32 buffers a plan uploads once, at creation; ``nrows`` is a kernel argument (int32), so one
kernel serves every set of sequence lengths.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RowGather:
    width: int
    src_ld: int
    dst_ld: int
    accumulate: bool = False
    wg: int = 32


def build_row_gather(p: RowGather):
    import loopy as lp
    import pymbolic.primitives as prim
    from pymbolic import var

    r, c = var("r"), var("c")
    k = var("k")
    load = lp.Assignment(k, var("idx")[var("i_off") + r], id="load",
                         within_inames=frozenset(["r", "c"]))
    val = prim.If(prim.Comparison(k, ">=", 0), var("src")[var("s_off") + k * p.src_ld + c],
                  np.float32(0))
    tgt = var("dst")[var("d_off") + r * p.dst_ld + c]
    store = lp.Assignment(tgt, (tgt + val) if p.accumulate else val, id="store",
                          depends_on=frozenset(["load"]), within_inames=frozenset(["r", "c"]))
    args = [lp.GlobalArg("dst", np.float32, shape=None, is_output=True, is_input=p.accumulate),
            lp.GlobalArg("src", np.float32, shape=None),
            lp.GlobalArg("idx", np.int32, shape=None)]
    args += [lp.ValueArg(o, np.int32) for o in ("d_off", "s_off", "i_off", "nrows")]
    args.append(lp.TemporaryVariable("k", np.int32, shape=(),
                                     address_space=lp.AddressSpace.PRIVATE))
    knl = lp.make_kernel(f"{{[r, c]: 0 <= r < nrows and 0 <= c < {p.width}}}", [load, store],
                         args, name="pydnnl_row_gather", lang_version=(2018, 2),
                         target=lp.PyOpenCLTarget())
    knl = lp.split_iname(knl, "c", min(p.wg, p.width), inner_tag="l.0", outer_tag="g.0")
    return lp.tag_inames(knl, {"r": "g.1"})
