"""examples/resnet50_inference.py: a reduced ResNet-50 (the same bottleneck structure, few
channels, small images) against a float64 numpy composition of pydnnl's reference primitives
with batch normalization unfolded, and against PyTorch where it is installed."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference.conv import conv_forward
from pydnnl.reference.eltwise import eltwise_forward
from pydnnl.reference.inner_product import inner_product_forward
from pydnnl.reference.normalization import batch_norm_forward
from pydnnl.reference.pooling import pooling_forward
from pydnnl.reference.softmax import softmax_forward

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "resnet50_inference.py"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


r50 = _load("resnet50_inference", EXAMPLE)

# widths / 8: the stem has 8 channels, enough for the library to run it as im2col + GEMM on
# channels-last activations, as the full model does (so the input reorder runs too)
WIDTH_DIV, BLOCKS, IMAGE, MB, CLASSES = 8, (1, 1, 1, 1), 32, 2, 10
# f32 sums of at most 9 * 64 products per output, 17 layers deep, against float64: the error
# grows to a few 1e-7 of the largest value (3.4e-7 measured); 1e-4 leaves room for other
# summation orders (Winograd, GEMM blockings) without hiding a wrong tap or channel
RTOL = 1e-4


def reference(params: dict, x: np.ndarray, blocks, eps: float = 1e-5):
    """(logits, probabilities) in float64, written from ResNet-50 v1.5's definition: batch norm
    applied after each convolution (not folded), the stride on the 3x3 convolution, a 1x1
    strided projection shortcut on each stage's first block."""
    p = {k: v.astype(np.float64) for k, v in params.items()}

    def relu(t):
        return eltwise_forward(dnnl.algorithm.eltwise_relu, t)

    def conv_bn(t, conv, bn, stride, pad):
        y = conv_forward(t, p[conv + ".weight"], None, [stride, stride], [0, 0], [pad, pad],
                         [pad, pad])
        return batch_norm_forward(y, eps, p[bn + ".running_mean"], p[bn + ".running_var"],
                                  p[bn + ".weight"], p[bn + ".bias"])[0]

    y = relu(conv_bn(x.astype(np.float64), "conv1", "bn1", 2, 3))
    y = pooling_forward(y, "max", [3, 3], [2, 2], [0, 0], [1, 1], [1, 1])[0]
    for stage, n in enumerate(blocks):
        for b in range(n):
            pre = f"layer{stage + 1}.{b}"
            stride = 2 if stage > 0 and b == 0 else 1
            t = relu(conv_bn(y, pre + ".conv1", pre + ".bn1", 1, 0))
            t = relu(conv_bn(t, pre + ".conv2", pre + ".bn2", stride, 1))
            t = conv_bn(t, pre + ".conv3", pre + ".bn3", 1, 0)
            short = (conv_bn(y, pre + ".downsample.0", pre + ".downsample.1", stride, 0)
                     if b == 0 else y)
            y = relu(t + short)
    h = y.shape[2]
    y = pooling_forward(y, "avg_exclude_padding", [h, h], [1, 1], [0, 0], [0, 0], [0, 0])[0]
    w = p["fc.weight"]
    logits = inner_product_forward(y, w.reshape(w.shape[0], -1, 1, 1), p["fc.bias"])
    return logits, softmax_forward(dnnl.algorithm.softmax_accurate, logits, 1)


def _max_rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_full_architecture_has_resnet50s_parameter_count():
    # torchvision.models.resnet50(): 25,557,032 trainable parameters (its documentation's
    # figure); the running statistics are buffers, not parameters
    shapes = r50.param_shapes(r50.architecture())
    n = sum(int(np.prod(s)) for k, s in shapes.items() if not k.endswith(("_mean", "_var")))
    assert n == 25_557_032


@pytest.fixture(scope="module")
def reduced():
    arch = r50.architecture(WIDTH_DIV, BLOCKS, CLASSES)
    params = r50.random_params(arch, seed=3)
    x = np.random.default_rng(4).standard_normal((MB, 3, IMAGE, IMAGE)).astype(np.float32)
    return arch, params, x


def test_reduced_resnet_matches_reference(engine, reduced):
    arch, params, x = reduced
    net = r50.ResNet50(engine, arch, params, MB, IMAGE)
    probs = net(x)
    logits = net.logits()
    want_logits, want_probs = reference(params, x, BLOCKS)
    # non-trivial: the classes are told apart and no probability saturates
    assert np.ptp(want_logits, axis=1).min() > 0.1 and want_probs.max() < 0.99
    assert _max_rel(logits, want_logits) < RTOL
    assert _max_rel(probs, want_probs) < RTOL
    # a second run over reused buffers gives the same answer
    assert np.array_equal(net(x), probs)
    assert net.reorders <= 2  # the input's and the output's, at most


def test_activation_slots_never_hold_two_live_tensors(cpu_engine, reduced):
    arch, params, _x = reduced
    net = r50.ResNet50(cpu_engine, arch, params, MB, IMAGE)
    ts = list(net._tensors.items())
    for i, (a, ta) in enumerate(ts):
        assert net._slots[ta.slot].get_desc().get_size() >= ta.desc.get_size(), a
        for b, tb in ts[i + 1:]:
            if ta.slot == tb.slot:  # disjoint lifetimes: one is last read before the other
                assert ta.last < tb.first or tb.last < ta.first, (a, b)
    for name, prim, args in net._steps:  # no primitive keeps a scratchpad of its own
        pd = prim.get_primitive_desc()
        assert pd.scratchpad_desc().get_size() == 0 or dnnl.ARG_SCRATCHPAD in args, name
    m = net.memory_report()
    assert m["activation_slots"] < m["activations_unshared"]
    assert m["peak"] == (m["weights"] + m["activation_slots"] + m["scratchpad"]
                         + m["user_io"])


def test_weights_file_round_trip(tmp_path, cpu_engine, reduced):
    arch, params, x = reduced
    path = tmp_path / "w.npz"
    r50.save_params(str(path), arch, params)
    arch2, params2 = r50.load_params(str(path))
    assert arch2 == arch and all(np.array_equal(params[k], params2[k]) for k in params)
    params2.pop("fc.bias")
    np.savez(path, _config=np.array([WIDTH_DIV, *BLOCKS, CLASSES]), **params2)
    with pytest.raises(dnnl.invalid_arguments, match="fc.bias"):
        r50.load_params(str(path))


def test_weights_script_writes_a_loadable_file(tmp_path):
    out = tmp_path / "w.npz"
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "resnet50_weights.py"),
                        "--width-div", "16", "--blocks", "1,1,1,1", "--source", "numpy",
                        "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    arch, params = r50.load_params(str(out))
    assert arch == r50.architecture(16, (1, 1, 1, 1), 1000)
    assert set(params) == set(r50.param_shapes(arch))


def test_example_runs_and_matches_torch(first_engine):
    pytest.importorskip("torch", reason="torch is not installed: no PyTorch comparison")
    r = subprocess.run([sys.executable, str(EXAMPLE), "--width-div", str(WIDTH_DIV), "--blocks",
                        "1,1,1,1", "--image", "32", "--mb", "2", "--classes", "10", "--iters",
                        "1", "--engine", first_engine.get_kind().name],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "images/s" in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("torch"))
    errs = [float(w.strip(",")) for w in line.split()[-3::2]]  # logits, probabilities
    assert max(errs) < RTOL, line


def test_full_model_matches_torchvision(first_engine):
    torch = pytest.importorskip("torch", reason="torch is not installed: no PyTorch comparison")
    pytest.importorskip("torchvision", reason="torchvision is not installed: the full model "
                                              "is compared with the example's torch.nn copy "
                                              "only when run by hand")
    arch = r50.architecture()
    params = r50.random_params(arch, seed=5)
    model = r50.torch_model(arch, params)
    assert type(model).__module__.startswith("torchvision")
    x = np.random.default_rng(6).standard_normal((1, 3, 64, 64)).astype(np.float32)
    net = r50.ResNet50(first_engine, arch, params, 1, 64)
    probs = net(x)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).double().numpy()
    assert _max_rel(net.logits(), want) < RTOL
    assert _max_rel(probs, torch.softmax(torch.from_numpy(want), 1).numpy()) < RTOL
