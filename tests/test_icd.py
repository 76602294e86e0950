"""ICD setup: Intel's CPU runtime, installed inside the environment, becomes visible to the ICD
loader next to the vendors that were already visible. Each case runs in a fresh subprocess,
because the loader reads OCL_ICD_VENDORS only once per process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pydnnl import _icd

LIB = _icd.find_intel_cpu_runtime()
needs_intel = pytest.mark.skipif(LIB is None, reason="Intel's CPU OpenCL runtime is not installed")

PROBE = r"""
import json, os
import pydnnl
import pyopencl as cl
folder = os.environ.get("OCL_ICD_VENDORS")
files = {}
if folder and os.path.isdir(folder):
    for n in sorted(os.listdir(folder)):
        if n.endswith(".icd"):
            files[n] = open(os.path.join(folder, n)).read()
print(json.dumps({"vendors": folder, "files": files,
                  "platforms": [p.name for p in cl.get_platforms()]}))
"""


def _probe(tmp_path: Path, **env_over) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OCL_ICD_VENDORS", "PYDNNL_SKIP_ICD_SETUP", "PYDNNL_DEVICE")}
    env["HOME"] = str(tmp_path / "home")
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    env.update({k: v for k, v in env_over.items() if v is not None})
    r = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_intel_runtime_lives_in_environment():
    if LIB is None:
        # only acceptable where the wheel cannot be installed
        import platform

        assert not (sys.platform == "linux" and platform.machine() == "x86_64"), \
            "intel-opencl-rt is a dependency on x86-64 Linux but libintelocl.so was not found"
        return
    assert LIB.name == "libintelocl.so" and LIB.is_file()
    prefixes = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    assert any(p in LIB.parents for p in prefixes), (LIB, prefixes)


@needs_intel
def test_corrected_icd_joins_existing_vendors(tmp_path):
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    fake = "/nonexistent/libfakevendor-opencl.so\n"
    (vendors / "fakevendor.icd").write_text(fake)
    out = _probe(tmp_path, OCL_ICD_VENDORS=str(vendors))
    folder = Path(out["vendors"])
    assert folder != vendors
    assert (tmp_path / "cache").resolve() in folder.resolve().parents  # per-user cache folder
    files = out["files"]
    assert files.get("fakevendor.icd") == fake  # the vendor already visible is kept
    intel = [n for n, t in files.items() if Path(t.strip()) == LIB]
    assert intel, files  # the corrected .icd names the real library path
    assert len(files) == 2
    assert any("Intel" in p for p in out["platforms"]), out["platforms"]
    # a second process finds the same folder and contents
    again = _probe(tmp_path, OCL_ICD_VENDORS=str(vendors))
    assert again["vendors"] == out["vendors"] and again["files"] == files


@needs_intel
def test_no_change_when_intel_already_listed(tmp_path):
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    (vendors / "intel.icd").write_text(f"{LIB}\n")
    out = _probe(tmp_path, OCL_ICD_VENDORS=str(vendors))
    assert out["vendors"] == str(vendors)
    assert not (tmp_path / "cache" / "pydnnl").exists()
    assert any("Intel" in p for p in out["platforms"])


@needs_intel
def test_skip_switch(tmp_path):
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    out = _probe(tmp_path, OCL_ICD_VENDORS=str(vendors), PYDNNL_SKIP_ICD_SETUP="1")
    assert out["vendors"] == str(vendors)
    assert not any("Intel" in p for p in out["platforms"])


@needs_intel
def test_unwritable_cache_leaves_loader_alone(tmp_path):
    blocker = tmp_path / "cache_is_a_file"
    blocker.write_text("")
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    out = _probe(tmp_path, OCL_ICD_VENDORS=str(vendors), XDG_CACHE_HOME=str(blocker))
    assert out["vendors"] == str(vendors)  # import still works, Intel simply stays invisible
