"""Device rules of the convolution family: which solver to try first for a problem, each
rule next to the measurements behind it. The solvers' own tuning defaults read the same
:class:`~pydnnl.engine.DeviceInfo` traits in their ``default_params``."""
from __future__ import annotations

from ...conv_shapes import ConvGeometry

#: taps (per stride phase for backward data) from which a CPU prefers implicit GEMM to
#: im2col + GEMM for layers with few output channels, per direction (see
#: :func:`solver_order`)
LARGE_KERNEL_TAPS = {"fwd": 25, "bwd_d": 25, "bwd_w": 100}
#: the same on GPUs, forward and backward weights only (see :func:`solver_order`)
GPU_LARGE_KERNEL_TAPS = {"fwd": 100, "bwd_w": 100}


def solver_order(kind: str, geom: ConvGeometry, info, fft_saving: float,
                 math: str = "strict") -> list[str]:
    """Solver names, most promising first, from the problem's shape alone.

    ``geom``: the convolution's geometry (a deconvolution's
    :meth:`~pydnnl.conv_shapes.ConvGeometry.as_convolution`). Grouped convolutions with few
    channels per group (depthwise) and other tiny GEMMs go direct: one launch covers every
    group. Everything else goes through im2col + GEMM on channels-last tensors, whose solver
    then also decides the layouts of ``format_tag.any`` (nhwc activations, weights with output
    channels innermost), so a network's layers and their backward passes agree on one layout.
    Measured on a 2-core AVX2 CPU (Intel's runtime, ResNet-50 layers, mb 1 and 32) once the
    GEMMs read packed weights and the patch copies stayed vectorised: 90-150 GFLOP/s forward,
    against 50-120 for the direct kernels (which fall to 1-10 GFLOP/s on 7x7 maps, strided
    backward data and backward weights). GPUs: GEMM-based unless the GEMMs would be tiny,
    Winograd F(2x2,3x3) first for its forward and backward-data problems; on CPUs Winograd first
    for those with at least 64 channels each side and last otherwise (its transforms cost about
    what it saves on narrower layers); backward weights with Winograd first on maps of at least
    28x28 points (on GPUs also with at least 512 output tiles, on CPUs also where forward
    takes it); FFT first where its products
    save enough multiplies; implicit GEMM ahead of im2col + GEMM for large kernels with few
    output channels (any stride: the patch matrix would be many times the input; on GPUs
    forward and backward weights from 100 taps);
    ``find`` measures every applicable solver.
    ``fft_saving``: how many times fewer multiplies the FFT's products need
    (:func:`~pydnnl.primitives.conv.solvers.fft.saving`). ``math``: what the fpmath mode
    lets GEMMs compute in (``"tf32"``: NVIDIA's tensor cores).
    """
    icg, ocg = geom.icg, geom.ocg
    k = 1
    for v in geom.kernel:
        k *= v
    small = icg * k < 16 or ocg < 8 or (geom.groups > 1 and icg * ocg < 64)
    wino_ok = (len(geom.kernel) == 2 and tuple(geom.kernel) == (3, 3)
               and all(s == 1 for s in geom.strides) and all(d == 0 for d in geom.dilates))
    direct_first = small
    order = ["direct", "im2col_gemm"] if direct_first else ["im2col_gemm", "direct"]
    # implicit GEMM (the patches computed in the loads): ahead of im2col + GEMM on CPUs for
    # stride-1 forward and backward data with kernels larger than 1x1 when the GEMM has at
    # least 512 rows (images x points). 2-core EPYC, ResNet-50 3x3 layers against im2col +
    # GEMM: mb32 forward 41-47 vs 43-53 ms, backward data 42-49 vs 44-61; mb1 res2a/res3a
    # (3136 / 784 points) 1.37 / 1.45 vs 1.55 / 1.48 ms, but res4a/res5a (196 / 49 points)
    # 1.9 / 4.2 vs 1.45 / 1.9 ms; backward weights gained nothing measurable
    stride1 = all(s == 1 for s in geom.strides)
    sp = geom.dst_spatial if kind == "fwd" else geom.src_spatial
    rows = geom.mb
    for v in sp:
        rows *= v
    implicit_first = (info.is_cpu and not small and k > 1 and stride1
                      and kind in ("fwd", "bwd_d") and rows >= 512)
    # large kernels with few output channels (any stride, every direction): the patch matrix
    # is k times the input and each of its elements feeds at most 64 output channels, so
    # im2col + GEMM streams a column buffer far past the caches for little arithmetic, while
    # implicit GEMM re-reads a cached input. Backward data counts the taps per stride phase
    # (its implicit form runs one GEMM per phase). 2-core EPYC (shared, loaded), minimum
    # times of three runs, DeepSpeech2 at mb8: conv1 (1 -> 32, 41x11, stride 2x2) forward
    # 20-29 against 135-174 ms, backward data 136-179 against 212-288, backward weights
    # 25-178 against 200-215; conv2 (32 -> 32, 21x11, stride 2x1) forward 108-152 against
    # 331-364, backward data 133-148 against 411-460, backward weights 301-333 against
    # 356-417. ResNet-50 conv1 (3 -> 64, 7x7, stride 2) at mb1: forward 1.8-1.9 against
    # 3.0-7.4 ms; backward weights a tie (3.3-3.5 against 2.8-3.6: long reductions over the
    # points keep im2col's GEMM busy, hence the higher bar), backward data with 12 taps per
    # phase 9.6 against 6.9
    phases = 1
    for v in geom.strides:
        phases *= v
    taps = k // phases if kind == "bwd_d" else k
    if info.is_cpu and not small and ocg <= 64 and taps >= LARGE_KERNEL_TAPS[kind]:
        implicit_first = True
    # GPUs likewise for forward and backward weights with 100 taps or more. H200, DeepSpeech2
    # at mb16, min ms against im2col + GEMM (cuDNN): conv1 forward 0.333 against 0.848
    # (0.21), backward weights 0.291 against 1.417 (0.21); conv2 forward 5.88 against 20.86
    # (1.50), backward weights 2.26 against 6.92 (1.36). Backward data keeps col2im: conv1
    # 8.05 against 0.62, conv2 5.86 against 2.08 (one implicit GEMM per stride phase). The
    # 7x7 stem (49 taps) was not measured there
    if (info.is_gpu and not small and ocg <= 64
            and taps >= GPU_LARGE_KERNEL_TAPS.get(kind, float("inf"))):
        implicit_first = True
    if implicit_first:
        order.insert(order.index("im2col_gemm"), "implicit_gemm")
    else:
        order.insert(order.index("im2col_gemm") + 1, "implicit_gemm")
    # Winograd first on GPUs (its 16 x groups products in one batched launch): H100, ResNet-50
    # 3x3 layers forward, 0.051-0.056 ms at mb1 and 0.18-0.35 at mb32 against 0.085-0.18 and
    # 0.43-0.78 for im2col + GEMM (0.78-2.2x cuDNN against 0.32-0.72x). CPUs (2-core EPYC)
    # with >= 128 channels each side: res3-res5 at mb1 0.66-1.41 ms against 1.0-1.52 for the
    # GEMM solvers, res4 at mb32 18.4 against 29.1; with 64 (res2) implicit GEMM wins at mb32
    # (31.3 against 34.7 ms); backward data likewise (res3/res4 mb1 0.66/0.98 against
    # 0.99/1.26 ms, res4 mb32 18.8 against 30.3), given enough 2x2 output tiles to pay for the
    # filter transform (res5 at mb1, 16 tiles: forward 1.41 against 1.52 ms, backward data
    # 3.99 against 3.18). With its chunks sized to the cache (winograd_chunk_mb) 64 channels
    # each side pay too (2-core AVX-512 Xeon, res2a_branch2b, min ms against implicit GEMM:
    # mb1 forward 0.746-0.750 against 0.872-0.881, backward data 0.760-0.765 against
    # 0.866-0.872; mb32 forward 28.9-31.7 against 39.0-39.3, backward data 28.4-33.4 against
    # 39.3-40.9)
    osp = geom.dst_spatial if kind == "fwd" else geom.src_spatial
    tiles = geom.mb * (-(-osp[0] // 2)) * (-(-osp[1] // 2)) if len(osp) == 2 else 0
    wide = min(icg, ocg) >= 64 and tiles >= 32
    # backward weights (F(3x3, 2x2)): first on any device for maps of >= 28 x 28 points
    # (H100 res2/res3: mb1 0.058/0.069 ms against 0.118/0.095 for im2col + GEMM, mb32
    # 0.54/0.45 against 0.86/0.52; 2-core EPYC mb1 0.67/0.69 against 1.54/1.28); on 14x14 and
    # 7x7 maps im2col + GEMM mostly wins (H100 res4 mb32 0.42 against 0.37, EPYC res4 mb1 1.58
    # against 1.14). GPUs also where its 2x2 tiles number at least 512 (H200, mb 32, min
    # ms: res4a 0.234 against 0.42-0.45 for im2col + GEMM with its one-round split, res5a
    # 0.273 against 0.31-0.33); at mb 1 im2col + GEMM keeps res4a/res5a (49 and 16 tiles:
    # 0.080/0.062 against 0.092/0.086). CPUs, once its chunks keep each product's operands in
    # a core's cache (winograd_chunk_mb), also on smaller maps of wide layers with the
    # forward's tile bar (2-core AVX-512 Xeon, min ms of three rounds against im2col + GEMM:
    # res4a mb32 32-39 against 56-65, res5a mb32 49-56 against 58-63, res4a mb1 (49 tiles)
    # 0.84-0.88 against 0.97-0.99; res5a at mb1, 16 tiles, keeps im2col + GEMM: 1.7-3.0
    # against 1.07-1.12)
    dsp = geom.dst_spatial
    big_maps = len(dsp) == 2 and dsp[0] * dsp[1] >= 784
    if kind == "bwd_w":
        first = wino_ok and not small and (big_maps or (info.is_gpu and tiles >= 512)
                                           or (info.is_cpu and wide)) \
            and not gathered_first(kind, geom, info, math)
    else:
        first = wino_ok and not small and (info.is_gpu or wide) \
            and not gathered_first(kind, geom, info, math)
    if first:
        order.insert(0, "winograd_f2x3")
    elif wino_ok:
        order.append("winograd_f2x3")
    # FFT first where its products need far fewer multiplies than direct summation. 2-core
    # EPYC (Intel's runtime), mb4-16, 32-128 channels (benchmarks/conv/large_kernels.txt):
    # 7x7 to 13x13 and a 1-D 25-tap kernel, 10-50x fewer, ran forward and backward data
    # 2.4-7x faster than im2col + GEMM and backward weights 1.7-3.1x; AlexNet's 5x5 with
    # 96 -> 256 channels, 8x fewer, forward 18.6 ms against about 50 but backward weights
    # 62 against 35 (its per-bin products are 96 x 256 outer products); 3x3 layers, 4x fewer,
    # lose. H100: forward 0.06-0.18 ms against 0.19-4.4 for im2col + GEMM (1.1-6.2x cuDNN
    # with its own search), backward data and weights likewise ahead of im2col + GEMM
    need = 9.0 if kind == "bwd_w" else 6.0
    if not small and fft_saving >= need:
        order.insert(0, "fft")
    else:
        order.append("fft")
    return order


# NVIDIA GPUs: a forward whose GEMM gathers its A from channels-last images (the input
# channels in whole 16-deep slices; no patch matrix) against Winograd F(2x2,3x3), which
# saves multiplies but moves the activations through memory in three passes. H200, ResNet-50
# 3x3 layers at mb 32, min ms, gathered / Winograd: strict res2a (64 channels, 56x56) 0.209 /
# 0.231, res3a (128, 28x28) 0.191 / 0.166, res4a (256, 14x14) 0.265 / 0.145, res5a (512,
# 7x7) 0.297 / 0.158; with tf32 0.136 / 0.227, 0.101 / 0.150, 0.129 / 0.105, 0.152 / 0.092.
# Backward data of stride-1 layers gathering diff_dst, with tf32: res2a 0.128 / 0.224, res3a
# 0.107 / 0.146, res2a at mb 8 0.057 / 0.069; strict only on a par (0.216 / 0.223) or behind
GATHER_FIRST_MAX_CHANNELS = {"strict": 64, "tf32": 128, "bf16": 128, "f16": 128}
GATHER_FIRST_MIN_ROWS = 25088  # the fewest measured (res3a at mb 32: 32 x 28 x 28)


def gathered_first(kind: str, geom: ConvGeometry, info, math: str) -> bool:
    """Whether a convolution's gathering GEMM goes ahead of Winograd: the forward (gathering
    the source's channels), the backward data of a stride-1 layer (gathering diff_dst's:
    the same GEMM over the output gradient, rows of diff_src), or the backward weights
    (gathering the source's channels, its k the output points). Backward weights, H200 mb 32,
    min ms, Winograd against the gathering GEMM: tf32 res2a_branch2b 0.311 / 0.149,
    res3a_branch2b 0.153 / 0.115, res4a_branch2b 0.110 / 0.142, res5a_branch2b 0.103 / 0.163;
    strict res2a 0.378 / 0.270, res3a 0.192 / 0.258."""
    if not (info.is_gpu and info.vendor_family == "nvidia") or geom.groups != 1:
        return False
    if kind in ("fwd", "bwd_w"):
        ch, sp = geom.icg, geom.dst_spatial
    elif kind == "bwd_d" and all(s == 1 for s in geom.strides) and math not in (None,
                                                                                "strict"):
        # (strict, res2a: mb 32 0.216 against Winograd's 0.223 ms, mb 8 0.089 against 0.069)
        ch, sp = geom.ocg, geom.src_spatial
    else:
        return False
    rows = geom.mb
    for v in sp:
        rows *= v
    return ch % 16 == 0 and ch <= GATHER_FIRST_MAX_CHANNELS.get(math or "strict", 64) \
        and rows >= GATHER_FIRST_MIN_ROWS


def gathered_phases(info, rows: int) -> bool:
    """Whether backward data of a strided layer runs as one gathering GEMM per output phase
    (``im2col_gemm``: no patch matrix, no col2im; ``rows``: the fewest rows of diff_src a
    phase's GEMM writes) instead of one GEMM into the patch matrix and col2im: NVIDIA GPUs,
    phases of at least ``GATHER_FIRST_MIN_ROWS`` rows. H200, ResNet-50 v1.5 stride-2 3x3
    layers at mb 32, min ms of two rounds, phases / col2im: res3a_branch2b (25088 rows a
    phase) tf32 0.141-0.143 / 0.231 (cuDNN TF32 0.125), strict 0.230-0.232 / 0.310-0.325;
    res4a_branch2b (6272) tf32 0.157-0.164 / 0.157-0.159, strict 0.312-0.322 /
    0.241-0.249; res5a_branch2b (1568) tf32 0.199-0.202 / 0.132-0.133 (their short GEMMs
    leave most of the device idle)."""
    return bool(info.is_gpu and info.vendor_family == "nvidia") and \
        rows >= GATHER_FIRST_MIN_ROWS


def fft_lid_lines(info) -> bool:
    """Whether the FFT's printed line passes take the last line index from the local id
    (``FftPass.lid_lines``): CPUs, whose compilers vectorize across work-items and then see
    neighbouring addresses (2-core EPYC, the first forward pass of k7_64c_32px 6.7 -> 3.9 ms,
    loopy's 3.9-4.4); not GPUs (H200 forward passes 3-19% slower that way)."""
    return bool(info.is_cpu)


def winograd_chunk_mb(info) -> float | None:
    """MiB of transformed tiles per chunk of images of a CPU's Winograd plans (input and
    diff_dst tiles for backward weights, input and product tiles otherwise, all 16 products),
    or None to keep the solver's default (GPUs: 64 MiB, the largest products). Each of the 16
    products runs at speed while its operands stay in the cache a core works from
    (``DeviceInfo.core_cache_bytes``), so the chunk holds about four caches' worth (16
    products of a quarter cache each). 2-core AVX-512 Xeon (2 MiB), mb 32, min ms of three
    interleaved rounds, 64 MiB chunks against 8 MiB: backward weights (its products read V
    transposed, summing over the chunk's tiles) res2a_branch2b 60.1 -> 29.3 (PyTorch 47.8),
    res3a_branch2b 48.4 -> 21.0 (PyTorch 26.9); forward res3a 28.9-32.9 -> 20.0-20.4, res5a
    34.7-35.6 -> 27.0-29.3; backward data res3a 25.3-32.5 -> 20.2-20.6, res4a 23.4-25.3 ->
    19.2-20.1, res5a 33.6-36.6 -> 28.7-29.7. Backward weights with 16 MiB chunks (one
    product 0.8 MiB) ran within noise of 8 (res2a 50-52 against 39-47, loaded machine)."""
    if info is None or info.is_gpu:
        return None
    return 4 * info.core_cache_bytes / (1 << 20)


#: share of the device's global memory one convolution's workspace may take: the user's
#: tensors, the framework's other buffers and the GEMM's packed copies need the rest
WORKSPACE_MEMORY_SHARE = 0.5


def workspace_limit(info) -> int:
    """The most workspace bytes a solver may ask for on this device: the largest single
    allocation (the workspace is one buffer) and at most ``WORKSPACE_MEMORY_SHARE`` of the
    global memory, whichever is smaller (0 traits count as unknown)."""
    caps = [int(info.global_mem_bytes * WORKSPACE_MEMORY_SHARE)] if info.global_mem_bytes else []
    if getattr(info, "max_mem_alloc_bytes", 0):
        caps.append(int(info.max_mem_alloc_bytes))
    return min(caps) if caps else 1 << 62



GPU_ROW_LANES = 16


def bias_grad_slicing(info, rows: int, channels: int) -> tuple[int, int, int, int] | None:
    """(rows per slice, work-group width, channels per work-item, work-items per slice along
    its rows) of a channels-last bias gradient in two passes (:mod:`pydnnl.kernels.
    channel_sums`: work-items along the channels, slices of rows, then the slices' sums
    added), or None for the one-pass kernel (a work-group per channel, its work-items along
    the points).

    Measured, bias gradient alone (ms, one pass -> two passes). 2-core AVX-512 Xeon, Intel's
    runtime (256 rows a slice, 16 channels a work-group: one vector): diff_dst 32x64x56x56
    16.0 -> 2.2, 32x1024x14x14 39.9 -> 4.0 (the one-pass kernel gathers across rows). H200,
    64 channels a work-group: 16-row slices 32x64x56x56 0.094 -> 0.025, 32x64x112x112
    0.357 -> 0.068, 32x256x14x14 -> 0.013; 256-row slices left too few work-groups on small
    tensors (1x64x56x56 0.006 -> 0.029, 32x512x7x7 0.019 -> 0.045), so GPUs keep the
    one-pass kernel below 2^20 values. The slices are at most ``MAX_SLICES`` (1024), so a
    large tensor's slices are long (32x64x56x56: 98 rows), walked by one work-item each
    (H200 tf32 backward weights at mb 32: 19-60 us of res2b_branch2a's 105 and conv1's 620):
    GPUs read float4s of channels where they are a multiple of 4, ``GPU_ROW_LANES`` work-items
    per slice along its rows, up to 256 work-items a group."""
    if info is not None and info.is_gpu:
        if rows * channels < 1 << 20:
            return None
        from ...kernels.channel_sums import lanes

        vec = 4 if channels % 4 == 0 else 1
        width = lanes(channels // vec, 64)
        return 16, 64, vec, max(1, min(GPU_ROW_LANES, 256 // width))
    return 256, 16, 1, 1


# CPUs: a 1x1 layer's backward-weights patches (the channels-last source's [points,
# channels] transposed into [channels, points]) through 8x8 register blocks, a work-item per 8
# points, instead of the channel-block im2col (a work-item per point, its loads gathered
# across neighbours). 2-core EPYC, Intel's runtime, the copy alone, min ms: [3136, 256]
# 1.7-1.8 -> 0.17 (element-wise kernels: 0.49-0.91). GPUs keep the im2col copy (work-groups
# of one work-item: not measured there)
def wgrad_kmajor_patches(info, kf: int) -> bool:
    """Whether backward weights into ``[Kf, OCg]`` weights write their patches transposed,
    ``[Kf, points]``, so that the GEMM reads A row by row (1x1 layers included: a copy of the
    source). CPUs: a transposed A ran 2-3x slower there (ResNet-50 res4 1x1 at mb 32: 60 ms
    GEMM against 19 ms GEMM + 5 ms copy). GPUs: the tiled GEMM loads a transposed A as
    coalesced as a plain one, so the patches keep the forward's ``[points, Kf]`` order and a
    dense 1x1 layer reads its source in place (H200, mb 32, tf32: res2b_branch2a 0.241 ->
    0.105 ms, v1.5 res3a_branch2a 0.299 -> 0.127; 3x3 stride 2 layers 14-20% faster, their
    copy coalesced), except where ``kf`` is not a multiple of 4: the tiled kernel reads a
    transposed A in float4s along m (conv1's 147 rows went to the generic GEMM: 0.615 ->
    1.051 ms)."""
    return info is None or not info.is_gpu or kf % 4 != 0


def gathered_wgrad(info, math: str, splits: int) -> bool:
    """Whether backward weights' GEMM that could gather its transposed A from the images
    (no patch matrix, ``GemmProblem.a_conv``) does: on tensor cores always; on the SIMT
    kernel (strict f32) where the product is cut into k slices. H200, mb 32, min ms, patch
    matrix -> gathered: tf32 v1.5 res3a_branch2b 0.249 -> 0.114, res4a_branch2b 0.184 ->
    0.147, res5a_branch2b 0.186 -> 0.163, the strided 1x1 layers 0-19% faster; strict
    res3a_branch2b 0.347 -> 0.260, res4a_branch2b 0.300 -> 0.262, the strided 1x1 layers
    0-20% faster, but res5a_branch2b (one unsplit 4608 x 512 x 1568 product on the same
    128 x 64 tile) 0.288 -> 0.379: its gathered kernel alone 0.243 -> 0.361."""
    from ...kernels.gemm_nv import MMA_KINDS
    from .gemm import tensor_cores

    return (math in MMA_KINDS and tensor_cores(info)) or splits > 1


def blocked_transpose(info) -> bool:
    """Whether 1x1 backward-weights patches are copied by ``kernels.transpose_source``."""
    return info is not None and not info.is_gpu


def copy_lanes(info) -> int:
    """Fewest work-items along axis 0 of an im2col copy whose innermost column dims are short
    (conv1's 7 taps x 3 channels per tap row). GPUs: a work-group of several warps along the
    column's contiguous run (ResNet-50 conv1 forward at mb 32 on the H200: 21-wide groups
    copied its 59 M patch values in 1.72 ms, 256-wide groups along taps, channels and output
    points in 0.58 ms; 32-bit indices instead of 64-bit ones for its divisions left that
    unchanged); CPU runtimes vectorise 16 lanes and pay per work-group, and their copy was
    measured with 16."""
    return 256 if info is not None and info.is_gpu else 16


def im2col_per_item(info, default: int) -> int:
    """Values each work-item of an im2col copy takes in its loops (whole column dims inside
    the lane dims, see ``conv_common.grid``): GPUs 16, so that a 3x3 layer's channel-wide
    lanes copy all 9 taps (a work-group per 3 taps, 128 channels, idled the H200: v1.5
    res3a_branch2b's patches at mb 32, 115 MB, took 0.114 ms in two 64 MB chunks with 4
    values a work-item, 0.071 ms in one chunk with 16; the chunk size is the forward's
    ``chunk_mb``); CPUs ``default``."""
    return 16 if info is not None and info.is_gpu else default


def copy_rows(info) -> tuple[int, int, bool]:
    """The baked im2col copy's work-group width, the values of group axis 1 (an output row)
    each work-item copies, and whether its indices may be 32-bit where they fit. GPUs: 256
    work-items, 4 rows each, 32-bit divisions (the H200 emulates 64-bit multiply-highs):
    ResNet-50 conv1 forward's 8-image chunk of 59 M patch values (H200, kernel ms) 0.145 with
    64-wide groups, one value each, 64-bit; 0.124 256-wide; 0.052 also 32-bit; 0.025 also 4
    rows each (a float4 fill of the same bytes 0.021). CPUs keep what was measured there: 64
    work-items, one row, 64-bit indices."""
    if info is not None and info.is_gpu:
        return 256, 4, True
    return 64, 1, False


# NVIDIA streaming multiprocessors since sm_50: 64 K 32-bit registers; up to 2048 resident
# work-items (sm_86/sm_89 hold 1536: the register bound binds first for the SGEMM blocks)
_NV_UNIT_REGISTERS = 65536
_NV_UNIT_THREADS = 2048


def nv_resident_blocks(tile) -> int:
    """Blocks of the hand-written SGEMM with ``tile`` (an ``NvTile`` without tensor cores)
    that one NVIDIA compute unit holds at once, bounded by its registers: a work-item keeps
    its ``tm x tn`` sums, one column of A and one row of B and about 24 addresses and
    counters (the compiler reported 125 registers for 8x8 tiles and 80 for 8x4, see
    :mod:`pydnnl.runtime.heuristics.gemm`): 128x128 blocks of 8x8 two, 64x128 four, 128x64
    of 8x4 three."""
    regs = tile.tm * tile.tn + 2 * (tile.tm + tile.tn) + 24
    return max(1, min(_NV_UNIT_REGISTERS // (regs * tile.threads),
                      _NV_UNIT_THREADS // tile.threads))


def one_round_splits(info, k: int, first: int, min_k: int, blocks_of) -> int:
    """How many k slices a GPU GEMM split for a weight gradient gets, given the compute-unit
    rule's count ``first``: ``first`` unless its batched launch has more blocks than the
    device holds at once, a second round running a few blocks on a mostly idle device; then
    the largest divisor of ``k`` below ``first`` (slices of at least ``min_k``) whose blocks
    fit in one round and give every unit at least one. ``blocks_of(s)``: ``(blocks, held
    per unit)`` of the launch with ``s`` slices, or None where its kernel's residency is
    unknown (the loopy family, tensor cores): ``first`` stays.

    H200, ResNet-50 3x3 backward weights at mb 32 (``--mode=K``): res4a_branch2b's 2304 x
    256 x 6272 product in 8 slices gave 288 128x128 blocks where 264 fit (two per unit):
    0.384 ms; res5a_branch2b's 4608 x 512 x 1568 in 2 slices likewise 0.350 ms, unsplit (288
    64x128 blocks, four per unit) 0.218 ms."""
    if info is None or not info.is_gpu or first <= 1:
        return first
    units = max(1, info.compute_units)

    def fits(s):
        got = blocks_of(s)
        if got is None:
            return None
        blocks, held = got
        return units <= blocks <= held * units

    ok = fits(first)
    if ok is None or ok:
        return first
    for s in range(first - 1, 0, -1):
        if k % s == 0 and (s == 1 or k // s >= min_k) and fits(s):
            return s
    return first


# Winograd's 16 batched products read the transformed filters as B. CPUs' register tiles read
# B fastest packed in their panels (a plain B costs a cache line per k step and column block
# once it outgrows the L1 cache); packing costs a pass over the filters per execution, for
# every chunk of images. 2-core AVX-512 Xeon, Intel's runtime, min ms, plain -> packed
# (2 interleaved rounds): mb 32 res5a (7x7, 512 channels, 1 MiB a product's B, 512 tiles)
# forward 22.6-25.3 -> 18.6-20.2, backward data 25.8-25.9 -> 18.9-22.0; res4a (256 KiB, 1568
# tiles) 16.6-17.2 -> 14.2-15.9; res3a (64 KiB, 6272) 17.6-18.7 -> 16.7-18.0; but mb 1 res4a
# (49 tiles) 0.81-0.84 -> 0.94-0.95, res3a (196) 0.55-0.65 -> 0.62-0.76, and res2a (16 KiB
# products, in L1) 0.70-0.72 either way. Hence packed from WINOGRAD_PACK_MIN_TILES tiles (all
# chunks) and WINOGRAD_PACK_MIN_B_BYTES of B. Backward weights' products (B: each chunk's
# transformed activations, packed per chunk) measured no gain: mb 32 res5a 27.8-28.0 ->
# 25.1-27.5, res3a 21.2-22.3 -> 22.8-23.4, mb 1 res2a 0.80-0.84 -> 0.94-0.95; not taken.
WINOGRAD_PACK_MIN_TILES = 512
WINOGRAD_PACK_MIN_B_BYTES = 64 << 10


def winograd_packed_filter(info, tiles: int, b_bytes: int) -> bool:
    """Whether Winograd's batched products read the transformed filters packed: ``tiles``
    rows over all chunks, ``b_bytes`` of one product's B."""
    return (not info.is_gpu and tiles >= WINOGRAD_PACK_MIN_TILES
            and b_bytes >= WINOGRAD_PACK_MIN_B_BYTES)


# CPU backward weights through im2col + GEMM: C[m = ICg * taps, n = OCg] sums k = images x
# points per chunk (tens of thousands). With a short m each row tile streams all of A's and
# B's k again from memory; cut into k slices whose A and B slices fit half the cache a core
# works from, the slices' products stay in cache (one batched launch, then a reduction).
# Slices read B plain, which costs wide B (rows a cache line per column block apart): taken
# where m and n are at most CPU_WGRAD_SPLIT_MAX_DIM. 2-core AVX-512 Xeon, mb 32 (min ms,
# unsplit -> slices; PyTorch): res2a_branch2a 64 x 64, k 50176: 12.7 -> 8.2 (8) / 6.4 (16) /
# 5.5 (32) (8.0); res2a_branch2c 64 x 256: 59.2 -> 49.4 (16) / 46.6 (32) / 38.2 (64) (43.3);
# res2b_branch2a 256 x 64: 39.1 -> 27.8 (32) (39.9); res3a_branch2c 128 x 512, k 25088: 35.4
# -> 44.9 (16) / 30.0 (32) (27.4); conv1 147 x 64: 85.8 -> 59.0 (32) (53.3), and at mb 1
# 2.27 -> 1.57 ms (16) (1.11); but res4a_branch2c 256 x 1024: 16.5 -> 40.9 (4) / 37.7 (16),
# res4b_branch2a 1024 x 256: 16.3 -> 20.9 (4) / 20.6 (12).
CPU_WGRAD_SPLIT_MAX_DIM = 512
CPU_WGRAD_SPLIT_MIN_K = 512  # fewest k per slice
CPU_WGRAD_MAX_SLICES = 64  # the solver's default cap (its ``split_k`` parameter)


def cpu_wgrad_slices(info, m: int, n: int, k: int, cap: int) -> int:
    """k slices (a divisor of ``k``, at most ``cap``) of a CPU backward-weights GEMM
    ``m x n x k`` whose A is row-major and B an activation: the fewest whose slices of A and
    B fit half of ``core_cache_bytes``, where m and n are short; 1 elsewhere."""
    if max(m, n) > CPU_WGRAD_SPLIT_MAX_DIM or k < 2 * CPU_WGRAD_SPLIT_MIN_K:
        return 1
    ks = max(CPU_WGRAD_SPLIT_MIN_K, info.core_cache_bytes // 2 // (4 * (m + n)))
    most = min(cap, k // CPU_WGRAD_SPLIT_MIN_K)
    want = -(-k // ks)
    divisors = [d for d in range(2, most + 1) if k % d == 0]
    if want <= 1 or not divisors:
        return 1
    above = [d for d in divisors if d >= want]
    return above[0] if above else divisors[-1]
