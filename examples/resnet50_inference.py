"""ResNet-50 v1.5 inference built from pydnnl primitives, the oneDNN way.

torchvision's layer structure (the stride of a bottleneck sits on its 3x3 convolution), with
batch normalization folded into the convolutions' weights and bias at load time, ReLU and the
residual add fused into the convolutions as post-ops, max and global average pooling, an
inner product and a softmax. Layouts are negotiated with ``format_tag.any``: the network reads
the user's NCHW image through one reorder and writes NC probabilities through another (each
only where the chosen layout differs); weights are reordered once, at load, into the layouts
the primitive descriptors ask for. Activations live in a few buffers reused across layers
(slots assigned by liveness); the peak device bytes are reported.

Run: python examples/resnet50_inference.py [--weights resnet50.npz] [--mb 1] [--image 224]
     [--width-div 1] [--blocks 3,4,6,3] [--engine cpu|gpu] [--device 0] [--iters 5]

Without ``--weights`` the parameters are seeded numpy draws (He initialization, non-trivial
batch-norm statistics); ``examples/resnet50_weights.py`` writes an ``.npz`` (from torchvision
when it is installed). With torch installed the output is compared with the same model in
PyTorch (torchvision's own ResNet-50 where torchvision is installed and the model is full size).
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

import pydnnl as dnnl
from pydnnl.runtime.plan import Bind, Plan

F32, TAG, MD = dnnl.memory.data_type.f32, dnnl.memory.format_tag, dnnl.memory.desc
ALG = dnnl.algorithm
BN_EPS = 1e-5  # torch.nn.BatchNorm2d's default
STAGES = (64, 128, 256, 512)  # bottleneck widths of layer1..layer4
EXPANSION = 4
FULL_BLOCKS = (3, 4, 6, 3)


# ---------------------------------------------------------------------------------------------
# architecture and parameters (torchvision's state_dict names)
# ---------------------------------------------------------------------------------------------
def architecture(width_div: int = 1, blocks=FULL_BLOCKS, classes: int = 1000) -> dict:
    """Channel counts of a ResNet-50 whose widths are divided by ``width_div``."""
    if width_div < 1 or 64 % width_div or len(blocks) != 4 or min(blocks) < 1:
        raise dnnl.invalid_arguments(
            f"resnet50: width_div must divide 64 and blocks be 4 counts >= 1, got "
            f"width_div={width_div}, blocks={list(blocks)}")
    return {"stem": 64 // width_div, "planes": [p // width_div for p in STAGES],
            "blocks": [int(b) for b in blocks], "classes": int(classes), "width_div": width_div}


def block_list(arch: dict):
    """``(prefix, in_channels, planes, stride, has_downsample)`` of every bottleneck."""
    inp = arch["stem"]
    for li, (planes, nb) in enumerate(zip(arch["planes"], arch["blocks"])):
        for b in range(nb):
            stride = 2 if (b == 0 and li > 0) else 1
            down = b == 0  # the first block of a stage changes the channel count
            yield f"layer{li + 1}.{b}", inp, planes, stride, down
            inp = planes * EXPANSION


def param_shapes(arch: dict) -> dict:
    """Every parameter's name and shape, as ``torchvision.models.resnet50().state_dict()``."""
    shapes = {}

    def conv(name, oc, ic, k):
        shapes[name + ".weight"] = (oc, ic, k, k)

    def bn(name, c):
        for p in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{name}.{p}"] = (c,)

    conv("conv1", arch["stem"], 3, 7)
    bn("bn1", arch["stem"])
    for pre, inp, planes, _stride, down in block_list(arch):
        conv(pre + ".conv1", planes, inp, 1)
        bn(pre + ".bn1", planes)
        conv(pre + ".conv2", planes, planes, 3)
        bn(pre + ".bn2", planes)
        conv(pre + ".conv3", planes * EXPANSION, planes, 1)
        bn(pre + ".bn3", planes * EXPANSION)
        if down:
            conv(pre + ".downsample.0", planes * EXPANSION, inp, 1)
            bn(pre + ".downsample.1", planes * EXPANSION)
    feat = arch["planes"][-1] * EXPANSION
    shapes["fc.weight"] = (arch["classes"], feat)
    shapes["fc.bias"] = (arch["classes"],)
    return shapes


def random_params(arch: dict, seed: int = 0) -> dict:
    """Seeded float32 parameters: He-normal convolutions (fan out, as torchvision), torch's
    default linear init, and batch-norm parameters and statistics away from the identity so
    that folding them into the convolutions is exercised."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in param_shapes(arch).items():
        kind = name.rsplit(".", 1)[1]
        c = shape[0]
        if name.startswith("fc."):
            bound = 1.0 / math.sqrt(param_shapes(arch)["fc.weight"][1])
            v = rng.uniform(-bound, bound, shape)
        elif len(shape) == 4:
            v = rng.standard_normal(shape) * math.sqrt(2.0 / (shape[0] * shape[2] * shape[3]))
        elif kind == "weight":
            v = rng.uniform(0.5, 1.5, c)
        elif kind == "bias":
            v = rng.normal(0.0, 0.1, c)
        elif kind == "running_mean":
            v = rng.normal(0.0, 0.1, c)
        else:  # running_var
            v = rng.uniform(0.5, 2.0, c)
        out[name] = v.astype(np.float32)
    return out


def save_params(path: str, arch: dict, params: dict) -> None:
    """Write ``params`` and the architecture (``_config``: width_div, 4 block counts,
    classes) to an ``.npz``."""
    cfg = np.array([arch["width_div"], *arch["blocks"], arch["classes"]], np.int64)
    np.savez(path, _config=cfg, **params)


def load_params(path: str) -> tuple[dict, dict]:
    """``(arch, params)`` from an ``.npz`` written by :func:`save_params`; every parameter the
    architecture needs must be there with its shape."""
    with np.load(path) as z:
        if "_config" not in z:
            raise dnnl.invalid_arguments(f"resnet50: {path} has no _config entry")
        cfg = [int(v) for v in z["_config"]]
        arch = architecture(cfg[0], cfg[1:5], cfg[5])
        params = {}
        for name, shape in param_shapes(arch).items():
            if name not in z:
                raise dnnl.invalid_arguments(f"resnet50: {path} lacks parameter {name}")
            if tuple(z[name].shape) != shape:
                raise dnnl.invalid_arguments(f"resnet50: {path}: {name} has shape "
                                             f"{list(z[name].shape)}, expected {list(shape)}")
            params[name] = np.asarray(z[name], np.float32)
    return arch, params


def fold_bn(w: np.ndarray, params: dict, bn: str) -> tuple[np.ndarray, np.ndarray]:
    """Convolution weights and bias with the inference batch norm ``bn`` folded in:
    ``gamma * (conv(x) - mean) / sqrt(var + eps) + beta`` is a convolution with weights scaled
    per output channel and a bias."""
    g = params[bn + ".weight"].astype(np.float64)
    scale = g / np.sqrt(params[bn + ".running_var"].astype(np.float64) + BN_EPS)
    bias = params[bn + ".bias"] - params[bn + ".running_mean"] * scale
    return ((w.astype(np.float64) * scale[:, None, None, None]).astype(np.float32),
            bias.astype(np.float32))


def out_size(i: int, k: int, s: int, p: int) -> int:
    return (i + 2 * p - k) // s + 1


# ---------------------------------------------------------------------------------------------
# the network on pydnnl primitives
# ---------------------------------------------------------------------------------------------
class _Tensor:
    """An activation: its desc, the steps that write it first and read it last, its slot."""

    __slots__ = ("desc", "first", "last", "slot")

    def __init__(self, desc, first):
        self.desc, self.first, self.last, self.slot = desc, first, first, None


class ResNet50:
    """ResNet-50 inference for one batch size and image size on ``eng``.

    Creation builds every primitive descriptor (layouts chosen with ``any``), reorders the
    weights once into the chosen layouts, plans the activation buffers and builds one runtime
    :class:`~pydnnl.runtime.plan.Plan` whose steps are the primitives. :meth:`__call__` runs
    it on a NCHW float32 batch and returns the ``[mb, classes]`` probabilities.
    """

    def __init__(self, eng, arch: dict, params: dict, mb: int, image: int):
        self.eng, self.arch, self.mb, self.image = eng, arch, mb, image
        self.stream = dnnl.stream(eng)
        self._steps = []  # (name, primitive, {ARG: tensor name | memory | Bind})
        self._tensors: dict[str, _Tensor] = {}
        self._weights = []  # device memories of the weights and biases
        self._scratch_bytes = 0
        self.reorders = 0  # activation reorders in the network (input and output only)
        biggest = max(int(np.prod(s)) for s in param_shapes(arch).values())
        self._staging = dnnl.memory(MD([biggest * 4], dnnl.memory.data_type.u8, TAG.a), eng)
        self._build(params)
        self.stream.wait()
        del self._staging  # back to the library's buffer pool, before the activations
        self._allocate()

    # -- building -------------------------------------------------------------------------------
    def _new(self, name: str, desc) -> str:
        self._tensors[name] = _Tensor(desc, len(self._steps))
        return name

    def _use(self, *names: str) -> None:
        for n in names:
            self._tensors[n].last = len(self._steps)

    def _attr(self, post_ops=None):
        attr = dnnl.primitive_attr()
        attr.set_scratchpad_mode(dnnl.scratchpad_mode.user)  # one scratchpad for every layer
        if post_ops is not None:
            attr.set_post_ops(post_ops)
        return attr

    def _upload(self, array: np.ndarray, desc, user_tag) -> dnnl.memory:
        """``array`` on the device in ``desc``'s layout: written as ``user_tag``, reordered
        once where ``desc`` differs."""
        user_md = MD(list(array.shape), F32, user_tag)
        if user_md == desc:
            mem = dnnl.memory(desc, self.eng, array)
        else:  # the user's copy goes through one staging buffer shared by every tensor
            self.stream.wait()  # the previous reorder has read the staging buffer
            user = dnnl.memory(user_md, self.eng, self._staging.buffer)
            user.write(array)
            mem = dnnl.memory(desc, self.eng)
            dnnl.reorder(user, mem).execute(self.stream, user, mem)
        self._weights.append(mem)
        return mem

    def _add(self, name, prim, args, scratch_desc=None) -> None:
        if scratch_desc is not None and scratch_desc.get_size() > 0:
            self._scratch_bytes = max(self._scratch_bytes, scratch_desc.get_size())
            args[dnnl.ARG_SCRATCHPAD] = ("scratch", scratch_desc)
        self._steps.append((name, prim, args))

    def _conv(self, name: str, src: str, params: dict, wname: str, bn: str, stride: int,
              pad: int, relu: bool, residual: str | None = None) -> str:
        """A convolution with ``bn`` folded in; ``residual``: a tensor added through a sum
        post-op (the convolution writes into it)."""
        w, b = fold_bn(params[wname + ".weight"], params, bn)
        oc, _ic, k, _ = w.shape
        n, _c, h, wd = self._tensors[src].desc.get_dims()
        oh, ow = out_size(h, k, stride, pad), out_size(wd, k, stride, pad)
        po = dnnl.post_ops()
        if residual is not None:
            po.append_sum(1.0)
        if relu:
            po.append_eltwise(ALG.eltwise_relu, 0.0, 0.0)
        dst_md = (self._tensors[residual].desc if residual is not None
                  else MD([n, oc, oh, ow], F32, TAG.any))
        # src: the producer's layout (the first convolution's chosen with ``any``); dst
        # ``any`` follows it, so activations never change layout inside the network
        pd = dnnl.convolution_forward.primitive_desc(
            self.eng, dnnl.prop_kind.forward_inference, ALG.convolution_auto,
            self._tensors[src].desc, MD(list(w.shape), F32, TAG.any), MD([oc], F32, TAG.x),
            dst_md, [stride, stride], [pad, pad], [pad, pad], self._attr(po))
        wm = self._upload(w, pd.weights_desc(), TAG.oihw)
        bm = self._upload(b, pd.bias_desc(), TAG.x)
        self._use(src)
        if residual is not None:
            self._use(residual)
            dst = residual
        else:
            dst = self._new(name, pd.dst_desc())
        self._add(name, dnnl.convolution_forward(pd),
                  {dnnl.ARG_SRC: src, dnnl.ARG_WEIGHTS: wm, dnnl.ARG_BIAS: bm,
                   dnnl.ARG_DST: dst}, pd.scratchpad_desc())
        return dst

    def _pool(self, name: str, src: str, alg, kernel: int, stride: int, pad: int) -> str:
        n, c, h, w = self._tensors[src].desc.get_dims()
        oh, ow = out_size(h, kernel, stride, pad), out_size(w, kernel, stride, pad)
        pd = dnnl.pooling_forward.primitive_desc(
            self.eng, dnnl.prop_kind.forward_inference, alg, self._tensors[src].desc,
            MD([n, c, oh, ow], F32, TAG.any), [stride, stride], [kernel, kernel], [0, 0],
            [pad, pad], [pad, pad])
        self._use(src)
        dst = self._new(name, pd.dst_desc())
        self._add(name, dnnl.pooling_forward(pd), {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
        return dst

    def _build(self, params: dict) -> None:
        arch, mb, image = self.arch, self.mb, self.image
        self.in_desc = MD([mb, 3, image, image], F32, TAG.nchw)
        self.out_desc = MD([mb, arch["classes"]], F32, TAG.nc)

        # the stem convolution chooses the activation layout (src and dst ``any``)
        w, b = fold_bn(params["conv1.weight"], params, "bn1")
        c0, s = arch["stem"], out_size(image, 7, 2, 3)
        po = dnnl.post_ops()
        po.append_eltwise(ALG.eltwise_relu, 0.0, 0.0)
        pd = dnnl.convolution_forward.primitive_desc(
            self.eng, dnnl.prop_kind.forward_inference, ALG.convolution_auto,
            MD([mb, 3, image, image], F32, TAG.any), MD([c0, 3, 7, 7], F32, TAG.any),
            MD([c0], F32, TAG.x), MD([mb, c0, s, s], F32, TAG.any), [2, 2], [3, 3], [3, 3],
            self._attr(po))
        if pd.src_desc() == self.in_desc:
            src = Bind("src", self.in_desc)
        else:  # the input reorder
            src = self._new("input", pd.src_desc())
            self._add("reorder_in", dnnl.reorder(
                dnnl.reorder.primitive_desc(self.eng, self.in_desc, self.eng, pd.src_desc())),
                {dnnl.ARG_FROM: Bind("src", self.in_desc), dnnl.ARG_TO: src})
            self.reorders += 1
        wm = self._upload(w, pd.weights_desc(), TAG.oihw)
        bm = self._upload(b, pd.bias_desc(), TAG.x)
        if isinstance(src, str):
            self._use(src)
        x = self._new("conv1", pd.dst_desc())
        self._add("conv1", dnnl.convolution_forward(pd),
                  {dnnl.ARG_SRC: src, dnnl.ARG_WEIGHTS: wm, dnnl.ARG_BIAS: bm, dnnl.ARG_DST: x},
                  pd.scratchpad_desc())
        x = self._pool("maxpool", x, ALG.pooling_max, 3, 2, 1)

        for pre, _inp, _planes, stride, down in block_list(arch):
            # order: the branch's first two convolutions, then the downsample, so that the
            # block input, the branch and the shortcut are never all live at their largest
            t = self._conv(pre + ".conv1", x, params, pre + ".conv1", pre + ".bn1", 1, 0, True)
            t = self._conv(pre + ".conv2", t, params, pre + ".conv2", pre + ".bn2", stride, 1,
                           True)
            if down:
                x = self._conv(pre + ".downsample", x, params, pre + ".downsample.0",
                               pre + ".downsample.1", stride, 0, False)
            # relu(bn3(conv3(t)) + shortcut), written over the shortcut
            x = self._conv(pre + ".conv3", t, params, pre + ".conv3", pre + ".bn3", 1, 0, True,
                           residual=x)

        n, c, h, w_ = self._tensors[x].desc.get_dims()
        assert h == w_, "square images only"
        x = self._pool("avgpool", x, ALG.pooling_avg_exclude_padding, h, 1, 0)

        classes = arch["classes"]
        pd = dnnl.inner_product_forward.primitive_desc(
            self.eng, dnnl.prop_kind.forward_inference, self._tensors[x].desc,
            MD([classes, c, 1, 1], F32, TAG.any), MD([classes], F32, TAG.x),
            MD([mb, classes], F32, TAG.any), self._attr())
        wm = self._upload(params["fc.weight"].reshape(classes, c, 1, 1), pd.weights_desc(),
                          TAG.oihw)
        # inner_product_forward.primitive_desc has no bias_desc() query (oneDNN's has), and
        # its weights_desc(1) is a zero desc: ask for the execute argument's desc instead
        bm = self._upload(params["fc.bias"], pd.query_md(dnnl.query.exec_arg_md, dnnl.ARG_BIAS),
                          TAG.x)
        self._use(x)
        logits = self._new("fc", pd.dst_desc())
        self._add("fc", dnnl.inner_product_forward(pd),
                  {dnnl.ARG_SRC: x, dnnl.ARG_WEIGHTS: wm, dnnl.ARG_BIAS: bm,
                   dnnl.ARG_DST: logits}, pd.scratchpad_desc())
        self.logits_name = logits

        pd = dnnl.softmax_forward.primitive_desc(
            self.eng, dnnl.prop_kind.forward_inference, ALG.softmax_accurate,
            self._tensors[logits].desc, MD([mb, classes], F32, TAG.any), 1)
        self._use(logits)
        if pd.dst_desc() == self.out_desc:
            self._add("softmax", dnnl.softmax_forward(pd),
                      {dnnl.ARG_SRC: logits, dnnl.ARG_DST: Bind("dst", self.out_desc)})
        else:  # the output reorder
            prob = self._new("softmax", pd.dst_desc())
            self._add("softmax", dnnl.softmax_forward(pd),
                      {dnnl.ARG_SRC: logits, dnnl.ARG_DST: prob})
            self._use(prob)
            self._add("reorder_out", dnnl.reorder(
                dnnl.reorder.primitive_desc(self.eng, pd.dst_desc(), self.eng, self.out_desc)),
                {dnnl.ARG_FROM: prob, dnnl.ARG_TO: Bind("dst", self.out_desc)})
            self.reorders += 1

    # -- memory ---------------------------------------------------------------------------------
    def _allocate(self) -> None:
        """Assign activations to slots by liveness (a tensor takes a free slot, the smallest
        that holds it, else the largest free one grown, else a new one), then allocate each
        slot once and bind the steps to views of them."""
        slots: list[int] = []  # bytes per slot
        free: set[int] = set()
        by_first: dict[int, list[_Tensor]] = {}
        by_last: dict[int, list[_Tensor]] = {}
        for t in self._tensors.values():
            by_first.setdefault(t.first, []).append(t)
            by_last.setdefault(t.last, []).append(t)
        for i in range(len(self._steps)):
            for t in by_first.get(i, ()):
                need = t.desc.get_size()
                fits = [j for j in free if slots[j] >= need]
                if fits:
                    j = min(fits, key=lambda j: slots[j])
                elif free:
                    j = max(free, key=lambda j: slots[j])
                    slots[j] = need
                else:
                    j = len(slots)
                    slots.append(need)
                free.discard(j)
                t.slot = j
            for t in by_last.get(i, ()):  # after this step nothing reads it
                free.add(t.slot)
        byte = dnnl.memory.data_type.u8
        self._slots = [dnnl.memory(MD([n], byte, TAG.a), self.eng) for n in slots]
        self._scratch = (dnnl.memory(MD([self._scratch_bytes], byte, TAG.a), self.eng)
                         if self._scratch_bytes else None)
        self.views = {name: dnnl.memory(t.desc, self.eng, self._slots[t.slot].buffer)
                      for name, t in self._tensors.items()}
        self.plan = Plan(self.eng, "resnet50")
        for _name, prim, args in self._steps:
            bound = {}
            for arg, v in args.items():
                if isinstance(v, str):
                    v = self.views[v]
                elif isinstance(v, tuple):  # the shared scratchpad, seen through this desc
                    v = dnnl.memory(v[1], self.eng, self._scratch.buffer)
                bound[arg] = v
            self.plan.primitive(prim, bound)

    def memory_report(self) -> dict:
        """Device bytes held while the network runs, by kind, and the issue's yardstick."""
        weights = sum(m.get_desc().get_size() for m in self._weights)
        acts = sorted((t.desc.get_size() for t in self._tensors.values()), reverse=True)
        slots = sum(m.get_desc().get_size() for m in self._slots)
        io = self.in_desc.get_size() + self.out_desc.get_size()
        peak = weights + slots + self._scratch_bytes + io
        yard = weights + sum(acts[:2])
        return {"weights": weights, "activation_slots": slots, "slots": len(self._slots),
                "activations_unshared": sum(acts), "scratchpad": self._scratch_bytes,
                "user_io": io, "peak": peak, "weights_plus_two_largest": yard,
                "ratio": peak / yard}

    # -- running --------------------------------------------------------------------------------
    def run(self, x: dnnl.memory, y: dnnl.memory) -> None:
        """Enqueue one inference of ``x`` (``in_desc``) into ``y`` (``out_desc``)."""
        self.plan.run(self.stream, {"src": x, "dst": y})

    def __call__(self, images: np.ndarray) -> np.ndarray:
        x = dnnl.memory(self.in_desc, self.eng, np.ascontiguousarray(images, np.float32))
        y = dnnl.memory(self.out_desc, self.eng)
        self.run(x, y)
        self.stream.wait()
        return y.to_numpy()

    def logits(self) -> np.ndarray:
        """The inner product's output of the last run (before the softmax)."""
        self.stream.wait()
        return self.views[self.logits_name].to_numpy()

    def describe(self) -> str:
        """One line per step: name, primitive and chosen layouts."""
        lines = []
        for name, prim, args in self._steps:
            out = args.get(dnnl.ARG_DST, args.get(dnnl.ARG_TO))
            out = self._tensors[out].desc if isinstance(out, str) else out.md
            lines.append(f"{name:22s} {prim.get_primitive_desc().impl_info_str():24s} "
                         f"dst {out.short_str()}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# the same model in PyTorch (for the comparison)
# ---------------------------------------------------------------------------------------------
def torch_model(arch: dict, params: dict):
    """The model in PyTorch in eval mode with ``params`` loaded: torchvision's
    ``resnet50`` where torchvision is installed and the model is full size, else the same
    layer structure written here with ``torch.nn`` (same parameter names)."""
    import torch
    from torch import nn

    full = arch["width_div"] == 1 and tuple(arch["blocks"]) == FULL_BLOCKS
    model = None
    if full:
        try:
            import torchvision
            model = torchvision.models.resnet50(weights=None, num_classes=arch["classes"])
        except (ImportError, RuntimeError):  # absent, or built for another torch
            model = None
    if model is None:
        class Bottleneck(nn.Module):
            def __init__(self, inp, planes, stride, down):
                super().__init__()
                out = planes * EXPANSION
                self.conv1 = nn.Conv2d(inp, planes, 1, bias=False)
                self.bn1 = nn.BatchNorm2d(planes)
                self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
                self.bn2 = nn.BatchNorm2d(planes)
                self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
                self.bn3 = nn.BatchNorm2d(out)
                self.relu = nn.ReLU(inplace=True)
                self.downsample = (nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False),
                                                 nn.BatchNorm2d(out)) if down else None)

            def forward(self, x):
                y = self.relu(self.bn1(self.conv1(x)))
                y = self.relu(self.bn2(self.conv2(y)))
                y = self.bn3(self.conv3(y))
                return self.relu(y + (x if self.downsample is None else self.downsample(x)))

        class ResNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1 = nn.Conv2d(3, arch["stem"], 7, 2, 3, bias=False)
                self.bn1 = nn.BatchNorm2d(arch["stem"])
                self.relu = nn.ReLU(inplace=True)
                self.maxpool = nn.MaxPool2d(3, 2, 1)
                layers = [[] for _ in range(4)]
                for pre, inp, planes, stride, down in block_list(arch):
                    layers[int(pre[5]) - 1].append(Bottleneck(inp, planes, stride, down))
                for i, ls in enumerate(layers):
                    setattr(self, f"layer{i + 1}", nn.Sequential(*ls))
                self.avgpool = nn.AdaptiveAvgPool2d(1)
                self.fc = nn.Linear(arch["planes"][-1] * EXPANSION, arch["classes"])

            def forward(self, x):
                x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
                x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
                return self.fc(torch.flatten(self.avgpool(x), 1))

        model = ResNet()
    state = {k: torch.from_numpy(v) for k, v in params.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise dnnl.invalid_arguments(f"resnet50: torch model keys differ: missing {missing}, "
                                     f"unexpected {unexpected}")
    return model.eval()


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------
def _seconds(run, wait) -> float:
    t0 = time.perf_counter()
    run()
    wait()
    return time.perf_counter() - t0


def _rate(mb: int, times: list[float]) -> str:
    """Images/s of the median and of the fastest of ``times`` (per-batch seconds)."""
    return (f"{mb / float(np.median(times)):.2f} images/s (median of {len(times)}; best "
            f"{mb / min(times):.2f})")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", help=".npz from examples/resnet50_weights.py (default: seeded "
                                      "numpy weights)")
    ap.add_argument("--mb", type=int, default=1, help="batch size")
    ap.add_argument("--image", type=int, default=224, help="image height and width")
    ap.add_argument("--width-div", type=int, default=1, help="divide every width by this")
    ap.add_argument("--blocks", default="3,4,6,3", help="bottlenecks per stage")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--engine", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--device", type=int, default=0, help="device index of that kind")
    ap.add_argument("--iters", type=int, default=5, help="timed inferences")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", action="store_true", help="print the chosen implementations")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    ap.add_argument("--fpmath", default="strict", choices=["strict", "tf32"],
                    help="pydnnl's fpmath mode (tf32: tensor cores where the device has them)")
    ap.add_argument("--torch-tf32", action="store_true",
                    help="let the CUDA peer use TF32 tensor cores (PyTorch's cuDNN default)")
    a = ap.parse_args(argv)

    if a.weights:
        arch, params = load_params(a.weights)
        print(f"weights: {a.weights} (width_div {arch['width_div']}, blocks {arch['blocks']})")
    else:
        arch = architecture(a.width_div, [int(b) for b in a.blocks.split(",")], a.classes)
        params = random_params(arch, a.seed)
        print(f"weights: seeded numpy (seed {a.seed})")

    eng = dnnl.engine(getattr(dnnl.engine.kind, a.engine), a.device)
    dnnl.set_default_fpmath_mode(a.fpmath)  # every primitive below starts with this mode
    print(f"device: {eng.info.name} [{eng.info.platform}]")
    t0 = time.perf_counter()
    net = ResNet50(eng, arch, params, a.mb, a.image)
    print(f"built in {time.perf_counter() - t0:.1f} s: {len(net.plan.steps)} primitives, "
          f"{net.reorders} activation reorders")
    if a.layers:
        print(net.describe())
    m = net.memory_report()
    mib = 1 << 20
    print(f"device memory: weights {m['weights'] / mib:.1f} MiB + activations "
          f"{m['activation_slots'] / mib:.1f} MiB in {m['slots']} reused buffers (unshared: "
          f"{m['activations_unshared'] / mib:.1f} MiB) + scratchpad {m['scratchpad'] / mib:.1f} "
          f"MiB + input/output {m['user_io'] / mib:.2f} MiB = {m['peak'] / mib:.1f} MiB; "
          f"{m['ratio']:.3f}x (weights + two largest activations = "
          f"{m['weights_plus_two_largest'] / mib:.1f} MiB)")

    rng = np.random.default_rng(a.seed + 1)
    images = rng.standard_normal((a.mb, 3, a.image, a.image)).astype(np.float32)
    probs = net(images)  # also the warm-up: the first launches bind the kernels
    x = dnnl.memory(net.in_desc, eng, images)
    y = dnnl.memory(net.out_desc, eng)
    model = None
    if not a.no_torch:
        try:
            import torch

            model = torch_model(arch, params)
        except ImportError:
            print("torch is not installed: no comparison")
    ours, theirs = [], []
    sync = lambda: None  # noqa: E731
    if model is not None and a.engine == "gpu" and torch.cuda.is_available():
        # the GPU peer: cuDNN with its autotuner, TF32 off (fp32 as pydnnl computes) unless
        # --torch-tf32 asks for the bar PyTorch users see by default
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = a.torch_tf32
        torch.backends.cudnn.allow_tf32 = a.torch_tf32
        model = model.cuda()
        sync = torch.cuda.synchronize
    if model is not None:
        with torch.no_grad():
            xt = torch.from_numpy(images)
            if a.engine == "gpu" and torch.cuda.is_available():
                xt = xt.cuda()
            logits = model(xt).cpu().numpy()
            for _ in range(3):  # cuDNN's autotuner picks its algorithms on the first calls
                model(xt)
            sync()
            # interleaved, so that load from other processes hits both alike; the pauses let
            # each runtime's idle worker threads stop spinning before the other one runs
            for _ in range(a.iters):
                time.sleep(0.3)
                ours.append(_seconds(lambda: net.run(x, y), net.stream.wait))
                time.sleep(0.3)
                theirs.append(_seconds(lambda: model(xt), sync))
    else:
        ours = [_seconds(lambda: net.run(x, y), net.stream.wait) for _ in range(a.iters)]
    print(f"pydnnl: {_rate(a.mb, ours)}, mb {a.mb}, image {a.image}")
    if model is None:
        return
    want = np.exp(logits - logits.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    err_l = np.abs(net.logits() - logits).max() / np.abs(logits).max()
    err_p = np.abs(probs - want).max() / np.abs(want).max()
    which = ("torchvision" if type(model).__module__.startswith("torchvision")
             else "torch.nn copy")
    print(f"torch {torch.__version__} ({which}): {_rate(a.mb, theirs)}; max "
          f"error relative to the largest value: logits {err_l:.2e}, probabilities {err_p:.2e}")


if __name__ == "__main__":
    main()
