"""Make OpenCL drivers that live inside the Python environment visible to the ICD loader.

Intel's CPU OpenCL runtime (the ``intel-opencl-rt`` wheel) installs ``libintelocl.so`` into the
environment's ``lib`` folder, and its ``.icd`` file names a placeholder path. The ICD loader reads
``OCL_ICD_VENDORS`` (a folder of ``.icd`` files) the first time a platform is queried, so before
that we write a corrected ``.icd`` into a per-user folder, add the ``.icd`` files of the vendors
that were already visible (``OCL_ICD_VENDORS`` or ``/etc/OpenCL/vendors``), and point the
variable at it. PoCL and Oclgrind wheels register themselves inside pyopencl and need nothing.
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

_SYSTEM_VENDORS = Path("/etc/OpenCL/vendors")
_done = False


def find_intel_cpu_runtime() -> Path | None:
    """Absolute path of the environment's ``libintelocl.so``, or None when not installed."""
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        try:
            dist = distribution("intel-opencl-rt")
        except PackageNotFoundError:
            dist = None
        if dist is not None:
            for f in dist.files or ():
                if f.name == "libintelocl.so":
                    p = Path(f.locate()).resolve()
                    if p.exists():
                        return p
    except Exception:  # metadata can be malformed; fall back to the prefix below
        pass
    for prefix in {sys.prefix, sys.base_prefix}:
        p = Path(prefix) / "lib" / "libintelocl.so"
        if p.exists():
            return p.resolve()
    return None


def _existing_icd_files() -> list[Path]:
    current = os.environ.get("OCL_ICD_VENDORS")
    if current:
        p = Path(current)
        if p.is_dir():
            return sorted(p.glob("*.icd"))
        if p.is_file():
            return [p]
        return []
    if _SYSTEM_VENDORS.is_dir():
        return sorted(_SYSTEM_VENDORS.glob("*.icd"))
    return []


def _vendors_dir(key: str) -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("pydnnl")) / "icd" / key


def ensure_icd() -> None:
    """Point ``OCL_ICD_VENDORS`` at a folder that also lists the environment's Intel CPU runtime.

    Idempotent; does nothing when the runtime is not installed, when it is already listed, or
    when ``PYDNNL_SKIP_ICD_SETUP=1``. Must run before the first ``pyopencl.get_platforms()``.
    """
    global _done
    if _done:
        return
    _done = True
    if os.environ.get("PYDNNL_SKIP_ICD_SETUP") == "1":
        return
    lib = find_intel_cpu_runtime()
    if lib is None:
        return
    existing = _existing_icd_files()
    for f in existing:
        try:
            if Path(f.read_text().strip()).resolve() == lib:
                return  # already visible
        except OSError:
            continue
    contents = {"pydnnl-intel-cpu.icd": f"{lib}\n"}
    for f in existing:
        try:
            contents.setdefault(f.name, f.read_text())
        except OSError:
            continue
    key = hashlib.sha256(repr(sorted(contents.items())).encode()).hexdigest()[:16]
    folder = _vendors_dir(key)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in contents.items():
            target = folder / name
            if not target.exists() or target.read_text() != text:
                tmp = folder / f".{name}.{os.getpid()}"
                tmp.write_text(text)
                tmp.replace(target)  # atomic under concurrent processes
    except OSError:
        return  # read-only home: Intel's runtime stays invisible, PoCL still works
    os.environ["OCL_ICD_VENDORS"] = str(folder)
