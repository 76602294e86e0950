"""Write ResNet-50 weights for examples/resnet50_inference.py as an ``.npz``.

Run: python examples/resnet50_weights.py [--out resnet50.npz] [--seed 0]
     [--source auto|torchvision|numpy] [--width-div 1] [--blocks 3,4,6,3] [--classes 1000]

``torchvision`` (the default where torch and torchvision are installed, full size only): the
state dict of ``torchvision.models.resnet50(weights=None)`` built after
``torch.manual_seed(seed)``. A freshly built model's batch norms are the identity (mean 0,
variance 1, scale 1, shift 0), which would leave the example's folding of them untested, so
their statistics and affine parameters are then drawn from the same seed (as
``random_params`` draws them). ``numpy``: ``random_params`` of the example, any size.
The file holds the parameters under torchvision's names and ``_config`` (width divisor, the
four block counts, classes).
"""
from __future__ import annotations

import argparse

import numpy as np
from resnet50_inference import (
    FULL_BLOCKS,
    architecture,
    random_params,
    save_params,
)


def torchvision_params(arch: dict, seed: int) -> dict:
    """torchvision's ResNet-50 parameters (seeded), batch norms made non-trivial."""
    import torch
    import torchvision

    torch.manual_seed(seed)
    model = torchvision.models.resnet50(weights=None, num_classes=arch["classes"])
    params = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()
              if not k.endswith("num_batches_tracked")}
    drawn = random_params(arch, seed)
    for k in params:
        if params[k].ndim == 1 and not k.startswith("fc."):  # every 1-D tensor but fc's is bn's
            params[k] = drawn[k]
    return params


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="resnet50.npz")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--source", default="auto", choices=["auto", "torchvision", "numpy"])
    ap.add_argument("--width-div", type=int, default=1)
    ap.add_argument("--blocks", default="3,4,6,3")
    ap.add_argument("--classes", type=int, default=1000)
    a = ap.parse_args(argv)

    arch = architecture(a.width_div, [int(b) for b in a.blocks.split(",")], a.classes)
    full = a.width_div == 1 and tuple(arch["blocks"]) == FULL_BLOCKS
    source = a.source
    if source == "auto":
        try:
            import torch  # noqa: F401
            import torchvision  # noqa: F401
            source = "torchvision" if full else "numpy"
        except ImportError:
            source = "numpy"
    if source == "torchvision" and not full:
        raise SystemExit("--source torchvision writes the full-size model only")
    params = torchvision_params(arch, a.seed) if source == "torchvision" else \
        random_params(arch, a.seed)
    save_params(a.out, arch, params)
    n = sum(v.size for v in params.values())
    print(f"wrote {a.out}: {len(params)} tensors, {n} values, from {source} (seed {a.seed})")


if __name__ == "__main__":
    main()
