"""``python -m pydnnl.onnx model.onnx --inputs x.npy [...]``: run a model on pydnnl and print
its outputs' shapes and the time of every node."""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pydnnl.onnx", description=__doc__)
    p.add_argument("model", help="an .onnx file")
    p.add_argument("--inputs", nargs="*", default=[], metavar="NPY",
                   help="one .npy file per graph input, in the graph's order, or NAME=FILE")
    p.add_argument("--device", default="CPU", help="CPU (default) or GPU, optionally :index")
    p.add_argument("--repeat", type=int, default=1,
                   help="timed runs after a warm-up run; node times are the medians")
    p.add_argument("--save", metavar="PREFIX",
                   help="write output i to PREFIX<i>.npy")
    args = p.parse_args(argv)

    import onnx

    from . import PydnnlBackend

    model = onnx.load(args.model)
    t0 = time.perf_counter()
    rep = PydnnlBackend.prepare(model, args.device)
    feeds: dict[str, np.ndarray] = {}
    for i, item in enumerate(args.inputs):
        name, sep, path = item.partition("=")
        if not sep:
            if i >= len(rep.input_names):
                p.error(f"{len(args.inputs)} input files for a model with "
                        f"{len(rep.input_names)} inputs {rep.input_names}")
            name, path = rep.input_names[i], item
        feeds[name] = np.load(path)
    prog = rep.program(rep.inputs_dict(feeds))   # primitives for these shapes, before timing
    prepare_s = time.perf_counter() - t0
    outs = rep.run(feeds)                   # warm-up: first launches bind the kernels
    runs = []
    for _ in range(max(args.repeat, 1)):
        timings: list = []
        t1 = time.perf_counter()
        outs = rep.run(feeds, timings=timings)
        runs.append((time.perf_counter() - t1, timings))
    print(f"device: {rep.engine.info.name}; prepare {prepare_s * 1e3:.1f} ms; tensors "
          f"{prog.nbytes / 2**20:.2f} MiB")
    for name, arr in zip(rep.output_names, outs):
        print(f"output {name}: shape {list(np.shape(arr))} {np.asarray(arr).dtype}")
        if args.save:
            np.save(f"{args.save}{rep.output_names.index(name)}.npy", arr)
    print(f"{'node':<32} {'op':<20} {'ms':>10}")
    for k, (name, op_type, t) in enumerate(runs[0][1]):
        if t is None:   # no work of its own: a view, a host constant or a fused activation
            shown = prog.steps[k].note
        else:
            shown = f"{np.median([r[1][k][2] for r in runs]) * 1e3:.3f}"
        print(f"{name[:32]:<32} {op_type:<20} {shown:>10}")
    print(f"{'total (run, waiting after each node)':<53} "
          f"{np.median([r[0] for r in runs]) * 1e3:>10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
