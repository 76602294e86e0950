"""source_from_loopy makes loopy's loop-nest code generation reuse its helper class: the code
is the same as with loopy's own per-call class, and the class is made once."""
from __future__ import annotations

import dataclasses

import numpy as np


def _kernel():
    import loopy as lp

    knl = lp.make_kernel(
        "{[i, j, v]: 0 <= i < n and 0 <= j < 3 and 0 <= v < 4}",
        "out[4 * (3 * i + j) + v] = 2 * x[4 * (3 * i + j) + v] if i < n - 1 else 0",
        [lp.GlobalArg("x", np.float32, shape=None), lp.GlobalArg("out", np.float32, shape=None),
         lp.ValueArg("n", np.int64)], target=lp.OpenCLTarget(), lang_version=(2018, 2))
    knl = lp.split_iname(knl, "i", 8, outer_tag="g.0")
    return lp.tag_inames(knl, {"j": "unr", "v": "unr"})


def test_loop_nest_class_reused_and_code_unchanged():
    from loopy.codegen import control

    from pydnnl.kernels import source

    patched = source.source_from_loopy(_kernel()).source
    if control.dataclass is dataclasses.dataclass:
        return  # a loopy without the per-call class: nothing was installed, nothing to check
    made = dict(source._DATACLASSES)
    assert made, "the loop-nest class was not made through the cache"
    again = source.source_from_loopy(_kernel()).source
    assert again == patched
    assert source._DATACLASSES == made  # no new class for the same body
    ours = control.dataclass
    control.dataclass = dataclasses.dataclass  # loopy's own behaviour, for this generation only
    try:
        import loopy as lp

        with source._without_loopy_disk_cache():
            plain = lp.generate_code_v2(lp.preprocess_program(_kernel())).device_code()
    finally:
        control.dataclass = ours
    assert plain == patched
