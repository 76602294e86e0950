"""pydnnl quick start: devices, memory descriptors, layouts and a reorder on the device.

Run: python examples/quickstart.py
"""
import numpy as np

import pydnnl as dnnl

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag


def main() -> None:
    print("OpenCL devices seen:")
    for d in dnnl.engine.list_devices():
        print(f"  {d.type:4s} {d.name} [{d.platform}], {d.compute_units} compute units")

    eng = dnnl.engine(dnnl.engine.kind.cpu, 0)
    s = dnnl.stream(eng)
    print(f"default CPU engine: {eng.info.name} [{eng.info.platform}]")

    # A batch of images in the user's layout (NCHW, float32) ...
    x = np.random.default_rng(0).standard_normal((8, 20, 14, 14)).astype(np.float32)
    user = dnnl.memory(dnnl.memory.desc(x.shape, dt.f32, tag.nchw), eng, x)

    # ... reordered on the device into a blocked layout (channels in blocks of 8) and bf16.
    blocked_md = dnnl.memory.desc(x.shape, dt.bf16, tag.nChw8c)
    blocked = dnnl.memory(blocked_md, eng)
    dnnl.reorder(user, blocked).execute(s, user, blocked)

    # ... and back to NHWC float32.
    back = dnnl.memory(dnnl.memory.desc(x.shape, dt.f32, tag.nhwc), eng)
    dnnl.reorder(blocked, back).execute(s, blocked, back)
    s.wait()

    y = back.to_numpy()
    err = np.max(np.abs(y - x) / np.maximum(np.abs(x), 1e-3))
    print(f"nchw f32 -> {blocked_md.short_str()} ({blocked_md.get_size()} bytes, channels padded "
          f"to {blocked_md.get_padded_dims()[1]}) -> nhwc f32")
    print(f"max relative error after the bf16 round trip: {err:.2e} (bf16 keeps 8 bits)")
    assert err < 2 ** -8


if __name__ == "__main__":
    main()
