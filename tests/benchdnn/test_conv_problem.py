"""benchdnn convolution descriptor parser: examples from oneDNN's docs and shape files,
deduction of output size and padding, round trips, batch files, bad strings."""
from __future__ import annotations

import os

import pytest

from pydnnl.benchdnn.conv_problem import (
    ConvProblem,
    parse_batch_text,
    parse_conv_problem,
    read_batch,
)
from pydnnl.conv_shapes import conv_output_dims
from pydnnl.error import invalid_arguments

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _geom_ok(p: ConvProblem) -> None:
    """The parsed sizes are a consistent oneDNN convolution."""
    assert conv_output_dims(p.src_dims(), p.weights_dims(), p.strides, p.dilates, p.padding_l,
                            p.padding_r) == p.dst_dims()


def test_resnet_res2a_branch2b():
    p = parse_conv_problem("mb50ic64ih56oc64oh56kh3ph1")
    assert (p.g, p.mb, p.ic, p.oc, p.ndims, p.has_groups) == (1, 50, 64, 64, 4, False)
    assert p.src_spatial == (56, 56) and p.dst_spatial == (56, 56) and p.kernel == (3, 3)
    assert p.strides == (1, 1) and p.dilates == (0, 0)
    assert p.padding_l == (1, 1) and p.padding_r == (1, 1)
    assert p.src_dims() == (50, 64, 56, 56)
    assert p.weights_dims() == (64, 64, 3, 3)
    assert p.dst_dims() == (50, 64, 56, 56)
    assert p.bias_dims() == (64,)
    # depth defaults
    assert (p.id, p.od, p.kd, p.sd, p.pd, p.pd_r, p.dd) == (1, 1, 1, 1, 0, 0, 0)
    # 2 * mb * oc * ic * (taps inside the input): per dim 56*3 - 2 border taps
    assert p.flops() == 2 * 50 * 64 * 64 * (56 * 3 - 2) ** 2
    _geom_ok(p)


def test_resnet_conv1():
    p = parse_conv_problem('g1mb50ic3ih224iw224oc64oh112ow112kh7kw7sh2sw2ph3pw3n"resnet_50:conv1"')
    assert p.has_groups and p.g == 1
    assert p.weights_dims() == (1, 64, 3, 7, 7)       # g written: grouped weights, as benchdnn
    assert p.strides == (2, 2) and p.padding_l == (3, 3)
    assert p.padding_r == (2, 2)                       # (112-1)*2 - 224 + 7 - 3
    assert p.name == "resnet_50:conv1"
    assert p.dst_dims() == (50, 64, 112, 112)
    _geom_ok(p)


def test_mobilenet_with_underscores():
    p = parse_conv_problem("mb32_g1ic32oc64_ih112oh112kh1sh1dh0ph0_iw112ow112kw1sw1dw0pw0")
    assert (p.mb, p.g, p.ic, p.oc) == (32, 1, 32, 64)
    assert p.src_spatial == (112, 112) and p.dst_spatial == (112, 112) and p.kernel == (1, 1)
    assert p.padding_l == p.padding_r == (0, 0)
    assert p.flops() == 2 * 32 * 64 * 32 * 112 * 112
    assert p.to_str() == "g1mb32ic32ih112oc64oh112kh1ph0"
    _geom_ok(p)


def test_mobilenet_strided_with_name():
    p = parse_conv_problem('mb32_g1ic3oc32_ih224oh112kh3sh2dh0ph1_iw224ow112kw3sw2dw0pw1'
                           '_n"mobilenet:conv1*3"')
    assert p.dst_spatial == (112, 112) and p.padding_l == (1, 1) and p.padding_r == (0, 0)
    assert p.name == "mobilenet:conv1*3" and p.repeats == 3
    _geom_ok(p)


def test_one_d():
    p = parse_conv_problem("mb4ic16iw100oc32ow50kw3sw2pw1")
    assert p.ndims == 3 and p.spatial_ndims == 1
    assert p.src_dims() == (4, 16, 100) and p.weights_dims() == (32, 16, 3)
    assert p.dst_dims() == (4, 32, 50)
    assert p.padding_l == (1,) and p.padding_r == (0,)
    assert (p.ih, p.oh, p.kh, p.id) == (1, 1, 1, 1)
    _geom_ok(p)
    assert parse_conv_problem(p.to_str()) == p
    # deduced output: (100 - 3 + 0) / 1 + 1
    assert parse_conv_problem("ic2iw100oc2kw3").dst_spatial == (98,)


def test_three_d_cubic_and_not():
    p = parse_conv_problem("mb2ic8id16oc8od16kd3pd1")
    assert p.ndims == 5
    assert p.src_dims() == (2, 8, 16, 16, 16) and p.dst_dims() == (2, 8, 16, 16, 16)
    assert p.weights_dims() == (8, 8, 3, 3, 3)
    assert p.padding_l == p.padding_r == (1, 1, 1)
    assert p.to_str() == "ic8id16oc8od16kd3pd1"
    _geom_ok(p)
    q = parse_conv_problem("ic4id5ih6iw7oc4kd2kh3kw1sd1sh2sw1dd1dh0dw0")
    assert q.src_spatial == (5, 6, 7) and q.kernel == (2, 3, 1) and q.strides == (1, 2, 1)
    assert q.dilates == (1, 0, 0)
    assert q.dst_spatial == (5 - 3 + 1, (6 - 3) // 2 + 1, 7)
    _geom_ok(q)
    assert parse_conv_problem(q.to_str()) == q


def test_grouped_depthwise():
    p = parse_conv_problem('g32mb8ic32ih112oc32oh112kh3ph1n"mobilenet:conv2_1/dw"')
    assert p.has_groups and p.g == 32
    assert p.weights_dims() == (32, 1, 1, 3, 3)
    assert p.flops() == 2 * 8 * 32 * 1 * (112 * 3 - 2) ** 2
    _geom_ok(p)
    q = parse_conv_problem("g2ic4ih5oc6kh3")
    assert q.weights_dims() == (2, 3, 2, 3, 3) and q.dst_spatial == (3, 3)
    _geom_ok(q)


def test_deduction_of_output_and_padding():
    # output omitted: computed with the given (or zero) symmetric padding
    p = parse_conv_problem("ic3ih10oc4kh3sh2ph1")
    assert p.dst_spatial == (5, 5)                        # (10 - 3 + 2) / 2 + 1
    assert p.padding_r == (0, 0)                          # (5-1)*2 - 10 + 3 - 1
    # padding omitted: trivial padding from the output size
    p = parse_conv_problem("ic3ih10oc4oh10kh3")
    assert p.padding_l == (1, 1) and p.padding_r == (1, 1)
    p = parse_conv_problem("ic3ih10oc4oh10kh4")
    assert p.padding_l == (1, 1) and p.padding_r == (2, 2)
    # stride-2 1x1: benchdnn derives a negative right padding
    p = parse_conv_problem("ic256ih56oc512oh28kh1sh2")
    assert p.padding_l == (0, 0) and p.padding_r == (-1, -1)
    _geom_ok(p)
    # dilation enters the extent: (k-1)*(d+1)+1 = 5
    p = parse_conv_problem("ic2ih9oc2kh3dh1")
    assert p.dst_spatial == (5, 5) and p.dilates == (1, 1)
    # truncating (C) division, as benchdnn: (2 - 3) / 2 + 1 = 1 with right padding 1
    p = parse_conv_problem("ic2ih2oc2kh3sh2")
    assert p.dst_spatial == (1, 1) and p.padding_r == (1, 1)
    _geom_ok(p)
    # a missing w is copied from h (square), including stride, padding and dilation
    p = parse_conv_problem("ic2ih9oc2kh3sh2ph1dh1")
    assert (p.iw, p.ow, p.kw, p.sw, p.pw, p.dw) == (p.ih, p.oh, p.kh, p.sh, p.ph, p.dh)


def test_defaults():
    p = parse_conv_problem("ic1ih1oc1kh1")
    assert (p.mb, p.g, p.has_groups, p.name) == (2, 1, False, "")
    assert p.strides == (1, 1) and p.dilates == (0, 0) and p.padding_l == (0, 0)
    assert p.to_str() == "ic1ih1oc1oh1kh1ph0"
    assert p.with_mb(16).mb == 16 and p.with_mb(0) is p


EXAMPLES = [
    "mb50ic64ih56oc64oh56kh3ph1",
    'g1mb50ic3ih224iw224oc64oh112ow112kh7kw7sh2sw2ph3pw3n"resnet_50:conv1"',
    "mb32_g1ic32oc64_ih112oh112kh1sh1dh0ph0_iw112ow112kw1sw1dw0pw0",
    "ic16iw100oc32ow50kw3sw2pw1",
    "mb2ic8id16oc8od16kd3pd1",
    "ic4id5ih6iw7oc4kd2kh3kw1sd1sh2sw1dd1dh0dw0",
    "g32mb8ic32ih112oc32oh112kh3ph1n\"mobilenet:conv2_1/dw\"",
    "ic3ih10iw12oc4kh3kw5sh2sw3ph1pw2dh1dw0",
    "ic256ih56oc512oh28kh1sh2",
    "mb1ic3ih227iw227_oc96oh55ow55_kh11kw11_sh4sw4ph0pw0_n\"alexnet:conv1\"",
    "ic2ih2oc2kh3sh2nplain_name",
]


@pytest.mark.parametrize("desc", EXAMPLES)
def test_round_trip(desc):
    p = parse_conv_problem(desc)
    s = p.to_str()
    assert parse_conv_problem(s) == p
    assert parse_conv_problem(s).to_str() == s
    assert str(p) == s
    assert ConvProblem.parse(s) == p
    # canonical form: every field written; parses to the same sizes (with explicit groups)
    c = parse_conv_problem(p.to_str(canonical=True))
    assert c.src_dims() == p.src_dims() and c.dst_dims() == p.dst_dims()
    assert c.padding_r == p.padding_r and c.flops() == p.flops()
    _geom_ok(p)


def test_flops_excludes_padding_taps():
    # 1-D, i=3, k=3, p=1: outputs 0,1,2 see 2,3,2 taps
    p = parse_conv_problem("mb1ic1iw3oc1kw3pw1")
    assert p.flops() == 2 * (2 + 3 + 2)
    p = parse_conv_problem("mb3g2ic4iw3oc6kw3pw1")
    assert p.flops() == 2 * 3 * 6 * 2 * 7


@pytest.mark.parametrize("desc, match", [
    ("", "empty descriptor"),
    ("ic3ih5kh3", r"`oc` was not specified"),
    ("oc3ih5kh3", r"`ic` was not specified"),
    ("ic3oc3", r"at least one spatial dim"),
    ("ic3ih5oc3", r"`kh` was not specified"),
    ("ic3oc3kh3", r"`ih` was not specified"),
    ("ic3ih5oc3kh3sh0", r"`sh` was not specified or is 0"),
    ("g0ic3ih5oc3kh3", r"`g` was not specified or is 0"),
    ("ic3ih5oc3kh7", r"`oh` was not specified .* <= 0"),
    ("ic3ih5oc3kh3ph-1", r"`ph` must be non-negative"),
    ("ic3ihoc3kh3", r"no value found for `ih`"),
    ("ic3ih5oc3kh3xy2", r"unrecognized entry starting at 'xy2'"),
    ("g2ic3ih5oc4kh3", r"divisible by g=2"),
    ("ic3id4ih5oc3kd3kh3", r"either all of its `h` and `w` dims or none"),
    (None, "expected a descriptor string"),
])
def test_bad_strings(desc, match):
    with pytest.raises(invalid_arguments, match=match):
        parse_conv_problem(desc)


def test_batch_text_options_comments_and_reset():
    text = """
# a comment line
--dir=FWD_B --mb=2
mb50ic64ih56oc64oh56kh3ph1  # trailing comment
--dir=BWD_D
ic3ih10oc4kh3 ic3iw10oc4kw3
g2ic4ih5oc6kh3n"has # inside the name"
--reset
ic1ih1oc1kh1
"""
    items = parse_batch_text(text)
    opts = [o for o, _ in items]
    probs = [p for _, p in items]
    assert opts == [("--dir=FWD_B", "--mb=2"), ("--dir=BWD_D", "--mb=2"),
                    ("--dir=BWD_D", "--mb=2"), ("--dir=BWD_D", "--mb=2"), ()]
    assert probs[0].mb == 50 and probs[2].ndims == 3
    assert probs[3].name == "has # inside the name"


def test_batch_nested(tmp_path):
    (tmp_path / "inner").write_text("--alg=WINO\nic3ih5oc3kh3\n")
    (tmp_path / "outer").write_text("--dir=BWD_W\n--batch=inner\nic3ih6oc3kh3\n")
    items = read_batch(tmp_path / "outer")
    assert [o for o, _ in items] == [("--dir=BWD_W", "--alg=WINO"), ("--dir=BWD_W",)]
    with pytest.raises(invalid_arguments, match=r"outer:1: .*unrecognized entry"):
        (tmp_path / "outer").write_text("bogus\n")
        read_batch(tmp_path / "outer")


@pytest.mark.parametrize("fname, network, layers, count", [
    ("resnet50.txt", "resnet_50:", 21, 53),
    ("mobilenet.txt", "mobilenet:", 19, 27),
])
def test_benchmark_problem_files(fname, network, layers, count):
    items = read_batch(os.path.join(REPO, "benchmarks", "conv", fname))
    probs = [p for _, p in items if p.name.startswith(network)]
    assert len(probs) == layers
    assert sum(p.repeats for p in probs) == count          # conv layers in the network
    assert all(p.mb == 1 for _, p in items)                 # placeholder for --mb
    assert len({p.name for _, p in items}) == len(items)
    for _, p in items:
        _geom_ok(p)
        assert parse_conv_problem(p.to_str()) == p
    if fname == "mobilenet.txt":
        dw = [p for p in probs if p.name.endswith(("/dw", "/dw*5"))]
        assert len(dw) == 9 and all(p.g == p.ic == p.oc and p.kernel == (3, 3) for p in dw)
        assert all(p.kernel == (1, 1) for p in probs if "/sep" in p.name)
    else:
        first = probs[0]
        assert first.kernel == (7, 7) and first.strides == (2, 2)
        strided_1x1 = [p for p in probs if p.kernel == (1, 1) and p.strides == (2, 2)]
        assert len(strided_1x1) == 6                        # branch1 + branch2a of res3-res5
