"""Generated sources stay byte for byte what they were: code-generation speed-ups (how the
GEMM box is split into domains, loopy's options, one preprocessing pass) must not change a
kernel, so its device speed cannot change either. Each case's ``KernelSource`` (source,
launch sizes, argument names) is compared with the SHA-256 recorded when the change was
made, for the loopy and islpy versions recorded with them (other versions may print other
code: the test skips there).

A deliberate change of a generator changes its hashes: check the new source, then print
the table again with ``python tests/kernels/test_codegen_unchanged.py`` and paste it here.
"""
from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from pydnnl.constants import algorithm as A
from pydnnl.kernels import gemm as G
from pydnnl.kernels.rnn_elementwise import ElementwiseProblem
from pydnnl.kernels.rnn_elementwise import build_elementwise_loopy as build_elementwise

VERSIONS = {"loopy": "2025.2", "islpy": "2025.2.5"}
RELU = ("eltwise", int(A.eltwise_relu), 0.0, 0.0)
LSTM_TILE = {"rows": 8, "cols": 48, "vec": 16, "packed_b": True}


def _dense(dims):
    """A reorder-style layout of a dense row-major tensor of ``dims`` (broadcast dims 1)."""
    per, stride = [], 1
    for d in reversed(dims):
        per.append((1, stride if d > 1 else 0, ()))
        stride *= d
    return (0, tuple(reversed(per)))


def _lstm_packing():
    src = G.GemmProblem(64, 2048, 512, runtime_offsets=True, runtime_m="tall", runtime_k=True)
    return G.pack_b(src, LSTM_TILE)


def _cases():
    """name -> builder of a loopy TranslationUnit: LSTM 512 inference's kernels, register
    tiles through each domain order the splits give (work-group rows on axis 0, m_loop with
    k_unroll and work-group columns, m_loop with a work-group row split, peeled k steps
    under a run-time k), epilogues, and the cell kernels of LSTM and GRU."""
    P = G.GemmProblem
    lstm = ElementwiseProblem("vanilla_lstm", 0, False, "tanh", 0.0, 512, 512, 512, wg=128,
                              store_gates=False)
    gru = ElementwiseProblem("vanilla_gru", 1, False, "tanh", 0.0, 32, 40, 32, wg=32,
                             store_gates=False)
    bd = (20, 32)
    return {
        "lstm_gemm": lambda: G.build_gemm(_lstm_packing().problem, LSTM_TILE),
        "lstm_pack_b": lambda: _lstm_packing().build(),
        "scales_binary_m_inner": lambda: G.build_gemm(
            P(20, 32, 12, scales=(("src", ()), ("wei", (1, 32)), ("dst", ())),
              post_ops=(("binary", int(A.binary_add), _dense(bd), bd, 20 * 32),)),
            {"rows": 4, "cols": 16, "vec": 8, "packed_b": False, "m_inner": True,
             "wg": (1, 2)}),
        "mloop_kunroll_wg_n": lambda: G.build_gemm(
            P(40, 48, 24, runtime_offsets=True, runtime_m="any"),
            {"rows": 2, "cols": 8, "vec": 4, "packed_b": False, "m_loop": 3, "k_unroll": 4,
             "wg": (2, 1)}),
        "mloop_wg_m_one_box": lambda: G.build_gemm(
            P(40, 48, 24), {"rows": 2, "cols": 8, "vec": 4, "packed_b": False, "m_loop": 2,
                            "wg": (2, 2)}),
        "peel_runtime_k_bias_relu": lambda: G.build_gemm(
            P(10, 20, 12, batch=2, runtime_offsets=True, runtime_k=True, runtime_m="any",
              bias=(_dense((1, 1, 20)), (1, 1, 20), 20), post_ops=(RELU,), epi_batch=(2,)),
            {"rows": 4, "cols": 8, "vec": 8, "packed_b": False, "k_unroll": 2}),
        "lstm_cell": lambda: build_elementwise(lstm),
        "lstm_cell_peephole_clip": lambda: build_elementwise(replace(
            lstm, peephole=True, clip=(-1.0, 1.0, True), store_gates=True, dhc=24, wg=8)),
        "lstm_cell_int8": lambda: build_elementwise(replace(
            lstm, dhc=16, wg=16, quant=(64.0, 128.0, 0, 255))),
        "gru_cell_stage1": lambda: build_elementwise(gru),
    }


HASHES = {
    "gru_cell_stage1": "1c36e03b5522f2effdb1f45c09aaa5ef7458d925e4713be055477f2d15b31a0a",
    "lstm_cell": "846b2a0c8d8ebb35e12e4e0b835730aa9e048fc8aba6d28eeb9378b51745bbd7",
    "lstm_cell_int8": "b80f7db0a16a922798a85e9c726e068bc62be2f9aa31ba9495226a1d143d297c",
    "lstm_cell_peephole_clip": "0a9e63e29abf694f8926f9d4c79314a9da9aa2db3afda089a500759be4c54a6b",
    "lstm_gemm": "934f2c8090440b06ad48bdfe6c6264832199a66b67a09b830a34cde41152a867",
    "lstm_pack_b": "50ea3290b525cb0211e59469eff303769c29ce7a216cf5ba11418444f71c2342",
    "mloop_kunroll_wg_n": "fd4c0c883047caf7a6ee4e9cc33e47e6f27273c976c53826521e3323ee10a14c",
    "mloop_wg_m_one_box": "a7a993056285a4fc212218fad3847880a74548f95f09c2a24ade1e9a51727881",
    "peel_runtime_k_bias_relu": "e3aef483d52aa4a66b3a006077f86ed59f1ccc28357a1e5bdf63f14ea03e6ae0",
    "scales_binary_m_inner": "5b038e96feff99467ce3b9615b2548abbf0dbb5c4c3d6a799fd0c150d24eced0",
}


def _hash(build) -> str:
    from pydnnl.kernels.source import source_from_loopy

    return hashlib.sha256(source_from_loopy(build()).to_json().encode()).hexdigest()


def _versions() -> dict:
    from importlib.metadata import version

    return {name: version(name) for name in VERSIONS}


@pytest.mark.parametrize("name", sorted(_cases()))
def test_generated_source_unchanged(name):
    if _versions() != VERSIONS:
        pytest.skip(f"hashes recorded with {VERSIONS}, installed {_versions()}")
    assert _hash(_cases()[name]) == HASHES[name], (
        f"{name}: the generated kernel changed (see this file's docstring)")


if __name__ == "__main__":
    print(f"VERSIONS = {_versions()!r}")
    print("HASHES = {")
    for n, b in sorted(_cases().items()):
        print(f'    "{n}": "{_hash(b)}",')
    print("}")
