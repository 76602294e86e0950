"""Engines: OpenCL devices, chosen by kind and index (``dnnl::engine``)."""
from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from functools import cached_property

from . import _icd
from .error import invalid_arguments

# Platforms that simulate a device: never chosen implicitly, only by PYDNNL_DEVICE or name.
_SIMULATORS = ("oclgrind",)


def _cl():
    _icd.ensure_icd()
    import pyopencl as cl

    return cl


@dataclass(frozen=True)
class DeviceInfo:
    """What a device is and what it can do: the traits every device heuristic reads.

    The first fields are OpenCL's own queries; ``vendor_family``, ``arch``, ``simd_width``
    and ``inline_ptx`` are derived from them once, when the device is listed, so that no
    heuristic parses vendor or platform strings itself.
    """

    name: str
    vendor: str
    platform: str
    driver_version: str
    device_version: str
    type: str  # "cpu", "gpu" or "accelerator"
    compute_units: int
    global_mem_bytes: int
    local_mem_bytes: int
    max_work_group_size: int
    max_clock_mhz: int
    fp16: bool
    fp64: bool
    preferred_float_vector_width: int
    #: "nvidia", "amd", "intel", "arm" or "other" (the hardware's maker, not the runtime's)
    vendor_family: str = "other"
    #: architecture family: "sm_90" (NVIDIA compute capability), "gfx90a" (AMD), "avx512",
    #: "avx2", "sse" or "neon" (CPUs, from the float SIMD width), else "unknown"
    arch: str = "unknown"
    #: float lanes one instruction works on: a CPU's native vector width, a GPU's warp or
    #: wavefront (NVIDIA 32, AMD 64), an Intel GPU's widest sub-group
    simd_width: int = 1
    max_work_item_sizes: tuple[int, ...] = (1024, 1024, 1024)
    global_mem_cache_bytes: int = 0  # last-level cache OpenCL reports (GPU L2, CPU L2/L3)
    global_mem_cacheline_bytes: int = 64
    #: the largest single buffer the device allocates (CL_DEVICE_MAX_MEM_ALLOC_SIZE); 0: unknown
    max_mem_alloc_bytes: int = 0
    extensions: tuple[str, ...] = ()
    #: the OpenCL compiler takes inline PTX (``asm volatile``): NVIDIA's driver
    inline_ptx: bool = False
    #: the OpenCL runtime: "intel", "pocl", "nvidia", "amd", "oclgrind" or "other"
    runtime: str = "other"

    @property
    def integer_dot_product(self) -> bool:
        """The OpenCL C compiler has ``cl_khr_integer_dot_product``'s ``dot`` of four 8-bit
        pairs (whether it is fast is the integer GEMM rules' business)."""
        return "cl_khr_integer_dot_product" in self.extensions

    @property
    def signature(self) -> str:
        """Identifies the device for caches and the perf database."""
        return (f"{self.platform}|{self.name}|{self.driver_version}|{self.compute_units}cu")

    @property
    def core_cache_bytes(self) -> int:
        """The cache one compute unit works from, for blocking rules. CPUs: the runtime's
        report kept within 1-4 MiB (Intel's runtime reports a core's L2, 2 MiB on a Xeon;
        PoCL the whole shared last-level cache, 480 MB on the same 2-core machine); GPUs: the
        reported L2 (1 MiB when unknown)."""
        reported = int(self.global_mem_cache_bytes or 0)
        if self.is_gpu:
            return reported or (1 << 20)
        return min(max(reported, 1 << 20), 4 << 20)

    @property
    def is_gpu(self) -> bool:
        return self.type == "gpu"

    @property
    def is_cpu(self) -> bool:
        return self.type != "gpu"


def _family(vendor: str) -> str:
    v = vendor.lower()
    for key, fam in (("nvidia", "nvidia"), ("advanced micro", "amd"), ("amd", "amd"),
                     ("intel", "intel"), ("arm", "arm")):
        if key in v:
            return fam
    return "other"


def _runtime(platform: str) -> str:
    p = platform.lower()
    for key, rt in (("portable computing language", "pocl"), ("pocl", "pocl"),
                    ("oclgrind", "oclgrind"), ("nvidia", "nvidia"), ("intel", "intel"),
                    ("amd accelerated", "amd")):
        if key in p:
            return rt
    return "other"


def _simd_and_arch(device, typ: str, family: str, ext: tuple[str, ...]) -> tuple[int, str]:
    """(SIMD width in floats, architecture family) from the vendors' extension queries."""
    def query(attr, default=None):
        try:
            return getattr(device, attr)
        except Exception:  # the extension is absent or the driver refuses the query
            return default

    if typ != "gpu":
        w = max(1, int(device.native_vector_width_float or 1))
        if family == "arm":
            return w, "neon"
        return w, "avx512" if w >= 16 else "avx2" if w >= 8 else "sse" if w >= 4 else "unknown"
    if "cl_nv_device_attribute_query" in ext:
        major = query("compute_capability_major_nv")
        minor = query("compute_capability_minor_nv")
        arch = f"sm_{major}{minor}" if major is not None else "unknown"
        return int(query("warp_size_nv", 32) or 32), arch
    if family == "amd":
        return int(query("wavefront_width_amd", 64) or 64), device.name.strip().split(":")[0]
    sizes = query("sub_group_sizes_intel") or ()
    return (max(sizes) if sizes else 8), "unknown"


def _device_info(platform, device) -> DeviceInfo:
    cl = _cl()
    t = device.type
    typ = "gpu" if t & cl.device_type.GPU else "cpu" if t & cl.device_type.CPU else "accelerator"
    ext = tuple(device.extensions.split())
    # a CPU runtime may be another maker's (Intel's runs on AMD CPUs): the name tells
    family = _family(device.name) if typ == "cpu" else "other"
    if family == "other":
        family = _family(device.vendor)
    simd, arch = _simd_and_arch(device, typ, family, ext)
    runtime = _runtime(platform.name)
    return DeviceInfo(
        name=device.name.strip(), vendor=device.vendor.strip(), platform=platform.name.strip(),
        driver_version=device.driver_version.strip(), device_version=device.version.strip(),
        type=typ, compute_units=device.max_compute_units,
        global_mem_bytes=device.global_mem_size, local_mem_bytes=device.local_mem_size,
        max_work_group_size=device.max_work_group_size, max_clock_mhz=device.max_clock_frequency,
        fp16="cl_khr_fp16" in ext, fp64="cl_khr_fp64" in ext or device.double_fp_config != 0,
        preferred_float_vector_width=device.preferred_vector_width_float,
        vendor_family=family, arch=arch, simd_width=simd,
        max_work_item_sizes=tuple(int(x) for x in device.max_work_item_sizes),
        global_mem_cache_bytes=int(device.global_mem_cache_size),
        global_mem_cacheline_bytes=int(device.global_mem_cacheline_size or 64),
        max_mem_alloc_bytes=int(device.max_mem_alloc_size),
        extensions=ext, inline_ptx=runtime == "nvidia", runtime=runtime)


def _cpu_rank(info: DeviceInfo) -> int:
    """Order CPU runtimes fastest first: Intel's runtime, other vendors' runtimes, then PoCL."""
    p = info.platform.lower()
    if "intel" in p:
        return 0
    if "portable computing language" in p or "pocl" in p:
        return 2
    return 1


@dataclass
class _Device:
    kind: "engine.kind"
    platform: object
    device: object
    info: DeviceInfo

    @cached_property
    def context(self):
        return _cl().Context([self.device])

    @cached_property
    def unusable(self) -> str:
        """Why the device cannot run pydnnl's kernels ('' when it can), probed on first use."""
        return _unusable_reason(self.platform, self.device)


_DEVICES: list[_Device] | None = None

# A runtime that lists a device but cannot compile for it: PoCL 3.0's LLVM 14 does not know
# CPUs newer than it (AMD Zen 5 among them) and asks for target CPU "generic", which its
# backend rejects, so every kernel build fails. Such a device is left out, with the reason.
_PROBE = "__kernel void pydnnl_probe(__global float *x) { x[get_global_id(0)] += 1.0f; }"


def _unusable_reason(platform, device) -> str:
    """Why the device cannot run pydnnl's kernels ('' when it can); probes PoCL only."""
    if "portable computing language" not in platform.name.lower():
        return ""
    cl = _cl()
    try:
        cl.Program(cl.Context([device]), _PROBE).build()
    except cl.Error as e:
        lines = [ln.strip() for ln in str(e).splitlines() if "error" in ln.lower()]
        detail = next((ln for ln in lines if ln.startswith("error:")), lines[-1] if lines else "")
        return f"its compiler cannot build a kernel for this CPU ({detail or e})"
    return ""


def _all_devices() -> list[_Device]:
    """Every OpenCL device listed, simulators included, CPU runtimes ordered fastest first;
    not yet probed (:func:`_usable` leaves out those that cannot build kernels)."""
    global _DEVICES
    if _DEVICES is None:
        cl = _cl()
        try:
            platforms = cl.get_platforms()
        except cl.Error:  # no ICD at all
            platforms = []
        found = []
        for p in platforms:
            try:
                devs = p.get_devices()
            except cl.Error:
                continue
            for d in devs:
                info = _device_info(p, d)
                k = engine.kind.gpu if info.type == "gpu" else engine.kind.cpu
                found.append(_Device(k, p, d, info))
        found.sort(key=lambda x: (x.kind, _cpu_rank(x.info) if x.kind == engine.kind.cpu else 0))
        _DEVICES = found
    return _DEVICES


def _usable(devs, upto: int | None = None) -> list[_Device]:
    """The devices of ``devs`` that can build kernels, in order; with ``upto``, only the
    first ``upto + 1`` of them. Devices are probed only as far as needed: the probe compiles
    a kernel with PoCL (0.45-0.5 s the first time on the AVX-512 Xeon, before PoCL's own
    cache holds it), and PoCL ranks after the other CPU runtimes, so ``engine(cpu, 0)`` with
    Intel's runtime present never pays it. Counting or listing devices probes them all."""
    out = []
    for d in devs:
        if upto is not None and len(out) > upto:
            break
        if not d.unusable:
            out.append(d)
    return out


def _unusable_devices() -> list[tuple[DeviceInfo, str]]:
    return [(d.info, d.unusable) for d in _all_devices() if d.unusable]


def _is_simulator(d: _Device) -> bool:
    return any(s in d.info.platform.lower() for s in _SIMULATORS)


def _matches(d: "_Device", sub: str) -> bool:
    """Whether a device's platform, name or vendor (or the short name ``pocl``) contains sub."""
    hay = f"{d.info.platform} {d.info.name} {d.info.vendor}".lower()
    if "portable computing language" in hay:
        hay += " pocl"
    return sub.lower() in hay


def _override() -> tuple[str, object] | None:
    """Parse PYDNNL_DEVICE: ('kind', (kind, index)) or ('name', substring)."""
    v = os.environ.get("PYDNNL_DEVICE", "").strip()
    if not v:
        return None
    head, _, tail = v.partition(":")
    if head.lower() in ("cpu", "gpu", "any") and (tail == "" or tail.isdigit()):
        return "kind", (engine.kind[head.lower()], int(tail or 0))
    return "name", v.lower()


def _candidates(kind: "engine.kind", upto: int | None = None) -> list[_Device]:
    """The usable devices of ``kind`` in engine-index order (only the first ``upto + 1``
    where given: see :func:`_usable`)."""
    ov = _override()
    devs = _all_devices()
    if ov and ov[0] == "name":
        sub = ov[1]
        devs = [d for d in devs if _matches(d, sub)]
    else:
        devs = [d for d in devs if not _is_simulator(d)]
    if kind != engine.kind.any:
        devs = [d for d in devs if d.kind == kind]
    return _usable(devs, upto)


def _describe_all() -> str:
    devs = _usable(_all_devices())
    left = "".join(f"; left out: {i.name} [{i.platform}]: {why}"
                   for i, why in _unusable_devices())
    if not devs:
        return ("no usable OpenCL device (install pocl-binary-distribution for a CPU device)"
                + left)
    return "; ".join(f"{d.kind.name}: {d.info.name} [{d.info.platform}]" for d in devs) + left


class engine:
    """An OpenCL device: ``engine(engine.kind.cpu, 0)``.

    CPU index 0 is the fastest CPU runtime present (Intel's CPU runtime when installed, else
    another vendor's, else PoCL). ``PYDNNL_DEVICE`` overrides the choice of index 0:
    ``gpu:0``/``cpu:1`` pick by kind and index, anything else keeps only devices whose platform
    or device name contains it (``pocl``, ``Intel``, ``Oclgrind``, ``NVIDIA``).
    """

    class kind(enum.IntEnum):
        any = 0
        cpu = 1
        gpu = 2

    def __init__(self, kind: "engine.kind" = None, index: int = 0):
        if kind is None:
            kind = engine.kind.cpu
        try:
            kind = engine.kind(kind)
        except ValueError:
            raise invalid_arguments(
                f"engine: kind must be engine.kind.cpu/gpu/any, got {kind!r}") from None
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise invalid_arguments(f"engine: index must be a non-negative int, got {index!r}")
        ov = _override()
        if ov and ov[0] == "kind" and index == 0 and kind in (engine.kind.any, ov[1][0]):
            kind, index = ov[1]
        devs = _candidates(kind, upto=index)
        if index >= len(devs):
            raise invalid_arguments(
                f"engine: no {kind.name} device with index {index} ({len(devs)} {kind.name} "
                f"device(s) available"
                + (f" with PYDNNL_DEVICE={os.environ.get('PYDNNL_DEVICE')!r}" if ov else "")
                + f"); devices seen: {_describe_all()}")
        self._dev = devs[index]
        self._kind = self._dev.kind
        # the device's OpenCL context is made with the engine, as oneDNN's engine makes its
        # own: a CUDA device's first context took 130 ms on an H200, which would otherwise
        # land on the first primitive's creation
        _ = self._dev.context

    @staticmethod
    def get_count(kind: "engine.kind") -> int:
        """Number of devices of ``kind`` (simulators excluded unless PYDNNL_DEVICE names them)."""
        return len(_candidates(engine.kind(kind)))

    @staticmethod
    def list_devices() -> list[DeviceInfo]:
        """Every usable OpenCL device seen, simulators included."""
        return [d.info for d in _usable(_all_devices())]

    @staticmethod
    def unusable_devices() -> list[tuple[DeviceInfo, str]]:
        """Devices an OpenCL runtime lists but that cannot build kernels, with the reason
        (PoCL 3.0 on CPUs newer than its LLVM); they take no engine index."""
        return _unusable_devices()

    @classmethod
    def from_name(cls, substring: str, index: int = 0) -> "engine":
        """The ``index``-th device whose platform or device name contains ``substring``."""
        devs = _usable([d for d in _all_devices() if _matches(d, substring)], upto=index)
        if index >= len(devs):
            raise invalid_arguments(
                f"engine.from_name: no device matching {substring!r} with index {index}; "
                f"devices seen: {_describe_all()}")
        e = cls.__new__(cls)
        e._dev, e._kind = devs[index], devs[index].kind
        return e

    def get_kind(self) -> "engine.kind":
        return self._kind

    @property
    def info(self) -> DeviceInfo:
        return self._dev.info

    @property
    def context(self):
        """The ``pyopencl.Context`` shared by all engines on this device."""
        return self._dev.context

    @property
    def device(self):
        """The ``pyopencl.Device``."""
        return self._dev.device

    @property
    def is_simulator(self) -> bool:
        return _is_simulator(self._dev)

    @cached_property
    def default_queue(self):
        """An in-order queue used for host transfers outside any stream."""
        return _cl().CommandQueue(self.context, self.device)

    def __eq__(self, other) -> bool:
        return isinstance(other, engine) and other._dev is self._dev

    def __hash__(self) -> int:
        return id(self._dev)

    def __repr__(self) -> str:
        return f"engine({self._kind.name}: {self.info.name} [{self.info.platform}])"
