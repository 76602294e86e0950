"""Engines: kinds, counts, device information and the PYDNNL_DEVICE override.

Expected device lists come from pyopencl's own enumeration, not from pydnnl.
"""
from __future__ import annotations

import pyopencl as cl
import pytest

import pydnnl as dnnl

SIMULATORS = ("oclgrind",)


def _builds(d) -> bool:
    """Whether the device's runtime compiles a trivial kernel (PoCL 3.0 cannot on CPUs newer
    than its LLVM)."""
    try:
        cl.Program(cl.Context([d]), "__kernel void k(__global int *x) { x[0] = 1; }").build()
    except cl.Error:
        return False
    return True


def _cl_devices():
    """(platform, device, is_gpu) of every usable device pyopencl sees, simulators excluded."""
    out = []
    for p in cl.get_platforms():
        if any(s in p.name.lower() for s in SIMULATORS):
            continue
        for d in p.get_devices():
            if _builds(d):
                out.append((p, d, bool(d.type & cl.device_type.GPU)))
    return out


def test_devices_that_cannot_build_are_left_out_with_the_reason(no_override):
    broken = {(p.name.strip(), d.name.strip()) for p in cl.get_platforms()
              for d in p.get_devices() if not _builds(d)}
    left = dnnl.engine.unusable_devices()
    assert {(i.platform, i.name) for i, _ in left} == broken
    seen = {(i.platform, i.name) for i in dnnl.engine.list_devices()}
    assert not seen & broken
    for info, why in left:
        assert "cannot build" in why
        with pytest.raises(dnnl.invalid_arguments, match="left out"):
            dnnl.engine.from_name(info.platform)


def _seen():
    """Every usable device, simulators included."""
    return [(p.name.strip(), d.name.strip()) for p in cl.get_platforms() for d in p.get_devices()
            if _builds(d)]


@pytest.fixture
def no_override(monkeypatch):
    monkeypatch.delenv("PYDNNL_DEVICE", raising=False)


def test_get_count_matches_pyopencl(no_override):
    devs = _cl_devices()
    assert dnnl.engine.get_count(dnnl.engine.kind.cpu) == sum(not g for _, _, g in devs)
    assert dnnl.engine.get_count(dnnl.engine.kind.gpu) == sum(g for _, _, g in devs)
    assert dnnl.engine.get_count(dnnl.engine.kind.any) == len(devs)
    assert dnnl.engine.get_count(dnnl.engine.kind.cpu) >= 1  # the install brings a CPU device


def test_every_device_reachable_and_kind(no_override):
    seen = set()
    for kind in (dnnl.engine.kind.cpu, dnnl.engine.kind.gpu):
        for i in range(dnnl.engine.get_count(kind)):
            e = dnnl.engine(kind, i)
            assert e.get_kind() == kind
            assert e.info.type == ("gpu" if kind == dnnl.engine.kind.gpu else "cpu")
            seen.add((e.info.platform, e.info.name))
    expected = {(p.name.strip(), d.name.strip()) for p, d, _ in _cl_devices()}
    assert seen == expected


def test_cpu_index0_is_fastest_runtime(no_override):
    platforms = [p.name for p, _, g in _cl_devices() if not g]
    cpus = [dnnl.engine(dnnl.engine.kind.cpu, i).info.platform for i in range(len(platforms))]
    if any("Intel" in p for p in platforms):
        assert "Intel" in cpus[0]
    pocl = [i for i, p in enumerate(cpus) if "Portable Computing Language" in p]
    assert all(i >= len(cpus) - len(pocl) for i in pocl)  # PoCL comes last


def test_kind_any_and_default(no_override):
    e_any = dnnl.engine(dnnl.engine.kind.any, 0)
    first = (dnnl.engine(dnnl.engine.kind.cpu, 0) if dnnl.engine.get_count(dnnl.engine.kind.cpu)
             else dnnl.engine(dnnl.engine.kind.gpu, 0))
    assert e_any == first
    assert dnnl.engine() == dnnl.engine(dnnl.engine.kind.cpu, 0)
    assert hash(dnnl.engine(dnnl.engine.kind.cpu, 0)) == hash(dnnl.engine(dnnl.engine.kind.cpu, 0))


def test_device_info_fields(engine):
    info = engine.info
    d = engine.device
    assert isinstance(info, dnnl.DeviceInfo)
    assert info.name == d.name.strip()
    assert info.platform == d.platform.name.strip()
    assert info.vendor == d.vendor.strip()
    assert info.driver_version == d.driver_version.strip()
    assert info.device_version == d.version.strip()
    assert info.compute_units == d.max_compute_units >= 1
    assert info.global_mem_bytes == d.global_mem_size > 0
    assert info.local_mem_bytes == d.local_mem_size
    assert info.max_work_group_size == d.max_work_group_size >= 1
    assert info.max_clock_mhz == d.max_clock_frequency
    assert info.fp16 == ("cl_khr_fp16" in d.extensions.split())
    assert info.fp64 == ("cl_khr_fp64" in d.extensions.split() or d.double_fp_config != 0)
    assert info.preferred_float_vector_width == d.preferred_vector_width_float
    assert info.platform in info.signature and info.name in info.signature
    assert engine.context.devices == [d]


def test_bad_kind_and_index(no_override):
    with pytest.raises(dnnl.invalid_arguments, match="kind"):
        dnnl.engine(7, 0)
    with pytest.raises(dnnl.invalid_arguments, match="index"):
        dnnl.engine(dnnl.engine.kind.cpu, -1)
    with pytest.raises(dnnl.invalid_arguments, match="index"):
        dnnl.engine(dnnl.engine.kind.cpu, 1.0)
    n = dnnl.engine.get_count(dnnl.engine.kind.cpu)
    with pytest.raises(dnnl.invalid_arguments) as ei:
        dnnl.engine(dnnl.engine.kind.cpu, n)
    msg = str(ei.value)
    assert "cpu" in msg and str(n) in msg and "devices seen" in msg


def test_no_device_of_kind_lists_devices(no_override):
    n_gpu = dnnl.engine.get_count(dnnl.engine.kind.gpu)
    with pytest.raises(dnnl.error) as ei:
        dnnl.engine(dnnl.engine.kind.gpu, n_gpu)
    assert isinstance(ei.value, ValueError)
    msg = str(ei.value)
    assert "gpu" in msg
    for plat, name in _seen():  # every device seen is listed, simulators included
        assert name in msg and plat in msg


def test_override_kind_index(monkeypatch):
    monkeypatch.delenv("PYDNNL_DEVICE", raising=False)
    n_cpu = dnnl.engine.get_count(dnnl.engine.kind.cpu)
    cpus = [dnnl.engine(dnnl.engine.kind.cpu, i) for i in range(n_cpu)]
    monkeypatch.setenv("PYDNNL_DEVICE", f"cpu:{n_cpu - 1}")
    assert dnnl.engine(dnnl.engine.kind.cpu, 0) == cpus[-1]
    assert dnnl.engine(dnnl.engine.kind.any, 0) == cpus[-1]
    # explicit non-zero indices are not overridden
    if n_cpu > 1:
        assert dnnl.engine(dnnl.engine.kind.cpu, 1) == cpus[1]
    monkeypatch.setenv("PYDNNL_DEVICE", "cpu:1")
    if n_cpu > 1:
        assert dnnl.engine(dnnl.engine.kind.cpu, 0) == cpus[1]
    else:
        with pytest.raises(dnnl.invalid_arguments, match="PYDNNL_DEVICE"):
            dnnl.engine(dnnl.engine.kind.cpu, 0)


def test_override_gpu0(monkeypatch):
    monkeypatch.delenv("PYDNNL_DEVICE", raising=False)
    n_gpu = dnnl.engine.get_count(dnnl.engine.kind.gpu)
    monkeypatch.setenv("PYDNNL_DEVICE", "gpu:0")
    if n_gpu:
        e = dnnl.engine(dnnl.engine.kind.any, 0)
        assert e.get_kind() == dnnl.engine.kind.gpu
        assert dnnl.engine(dnnl.engine.kind.gpu, 0) == e
    else:
        with pytest.raises(dnnl.invalid_arguments) as ei:
            dnnl.engine(dnnl.engine.kind.any, 0)
        msg = str(ei.value)
        assert "gpu" in msg and "PYDNNL_DEVICE='gpu:0'" in msg and "devices seen" in msg


@pytest.mark.parametrize("sub", ["Portable", "pocl", "Intel"])
def test_override_platform_substring(monkeypatch, sub):
    monkeypatch.delenv("PYDNNL_DEVICE", raising=False)
    def names(platform, name, vendor):  # what PYDNNL_DEVICE matches (README: "pocl" is PoCL)
        hay = f"{platform} {name} {vendor}".lower()
        return hay + (" pocl" if "portable computing language" in hay else "")

    matching = [(p, d) for p, d, g in _cl_devices()
                if not g and sub.lower() in names(p.name, d.name, d.vendor)]
    if sub == "pocl":  # the short name finds PoCL whenever PoCL is installed
        assert bool(matching) == any("Portable" in p.name for p, _, _ in _cl_devices())
    monkeypatch.setenv("PYDNNL_DEVICE", sub)
    assert dnnl.engine.get_count(dnnl.engine.kind.cpu) == len(matching)
    if matching:
        e = dnnl.engine(dnnl.engine.kind.cpu, 0)
        assert sub.lower() in names(e.info.platform, e.info.name, e.info.vendor)
    else:
        with pytest.raises(dnnl.invalid_arguments, match=sub):
            dnnl.engine(dnnl.engine.kind.cpu, 0)


def test_simulator_only_by_name(monkeypatch):
    monkeypatch.delenv("PYDNNL_DEVICE", raising=False)
    grind = [(p, d) for p in cl.get_platforms() if "oclgrind" in p.name.lower()
             for d in p.get_devices()]
    if not grind:
        with pytest.raises(dnnl.invalid_arguments, match="Oclgrind"):
            dnnl.engine.from_name("Oclgrind")
        return
    e = dnnl.engine.from_name("Oclgrind")
    assert e.is_simulator and "Oclgrind" in e.info.platform
    kind = dnnl.engine.kind.gpu if grind[0][1].type & cl.device_type.GPU else dnnl.engine.kind.cpu
    # not among the implicit choices
    for i in range(dnnl.engine.get_count(kind)):
        assert not dnnl.engine(kind, i).is_simulator
    monkeypatch.setenv("PYDNNL_DEVICE", "oclgrind")
    assert dnnl.engine.get_count(kind) == 1
    assert dnnl.engine(kind, 0) == e
    assert dnnl.engine(dnnl.engine.kind.any, 0) == e


def test_list_devices_includes_simulators(no_override):
    listed = {(d.platform, d.name) for d in dnnl.engine.list_devices()}
    assert listed == set(_seen())


def test_probe_only_as_far_as_the_index_needs(monkeypatch):
    """A device is probed (a kernel compiled) only when an engine index, a count or a
    listing reaches it: engine(cpu, 0) with a faster runtime first never probes PoCL, and a
    device that cannot build still gives the reason wherever it would have been chosen."""
    import importlib

    E = importlib.import_module("pydnnl.engine")
    monkeypatch.delenv("PYDNNL_DEVICE", raising=False)

    def info(name, platform):
        return dnnl.DeviceInfo(name=name, vendor="v", platform=platform, driver_version="1",
                               device_version="OpenCL 3.0", type="cpu", compute_units=2,
                               global_mem_bytes=1 << 30, local_mem_bytes=1 << 15,
                               max_work_group_size=256, max_clock_mhz=1000, fp16=False,
                               fp64=True, preferred_float_vector_width=8)

    probed = []

    def fake_reason(platform, device):
        probed.append(device)
        return "its compiler cannot build a kernel for this CPU (test)" if device == "bad" else ""

    devs = [E._Device(dnnl.engine.kind.cpu, "p", "good", info("good", "Intel(R) OpenCL")),
            E._Device(dnnl.engine.kind.cpu, "p", "bad",
                      info("bad", "Portable Computing Language"))]
    monkeypatch.setattr(E, "_DEVICES", devs)
    monkeypatch.setattr(E, "_unusable_reason", fake_reason)
    assert [d.device for d in E._candidates(dnnl.engine.kind.cpu, upto=0)] == ["good"]
    assert probed == ["good"]
    with pytest.raises(dnnl.invalid_arguments, match="left out: bad .*cannot build"):
        dnnl.engine.from_name("Portable")
    assert probed == ["good", "bad"]
    assert dnnl.engine.get_count(dnnl.engine.kind.cpu) == 1
    assert [i.name for i, _ in dnnl.engine.unusable_devices()] == ["bad"]
    assert [i.name for i in dnnl.engine.list_devices()] == ["good"]
    assert probed == ["good", "bad"]  # each device is probed once
