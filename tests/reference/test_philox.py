"""Philox4x32 against the published Random123 known-answer vectors, and the dropout mask
convention built on it: counter layout, threshold edges, drop rates, seeds and offsets."""
from __future__ import annotations

import math

import numpy as np
import pytest

from pydnnl.error import invalid_arguments
from pydnnl.reference.philox import (
    dropout_backward,
    dropout_forward,
    dropout_keep,
    dropout_scale,
    dropout_scales,
    dropout_threshold,
    dropout_words,
    philox4x32,
)

# Known answers of Philox4x32-R: name, rounds, counter[4], key[2], expected[4].
# The first six lines are tests/kat_vectors lines 24-29 of github.com/DEShawResearch/random123
# (commit 9545ff6413f258be2f04c1d319d99aaef7521150); the rest are the 10-round lines with
# keys (1, 0) and (0, 0x80000000) of tests/old_kat_vectors in the same commit.
KAT = """
philox4x32 7 00000000 00000000 00000000 00000000 00000000 00000000   5f6fb709 0d893f64 4f121f81 4f730a48
philox4x32 7 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   5207ddc2 45165e59 4d8ee751 8c52f662
philox4x32 7 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   4dfccaba 190a87f0 c47362ba b6b5242a
philox4x32 10 00000000 00000000 00000000 00000000 00000000 00000000   6627e8d5 e169c58d bc57ac4c 9b00dbd8
philox4x32 10 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   408f276d 41c83b0e a20bc7c6 6d5451fd
philox4x32 10 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   d16cfe09 94fdcceb 5001e420 24126ea1
philox4x32 10 00000001 00000000 00000000 00000000   00000001 00000000   ac08141b dfc5ccbe 79c07a47 a7f66093
philox4x32 10 00000000 00000001 00000000 00000000   00000001 00000000   833ff8dc 225c963c 232b88b3 0b334b07
philox4x32 10 00000000 00000000 00000001 00000000   00000001 00000000   07071c12 428264b6 3909104b 6da2bda2
philox4x32 10 00000000 00000000 00000000 00000001   00000001 00000000   127bee41 1e047488 48842b20 0a393496
philox4x32 10 00000000 ffffffff 00000000 00000000   00000001 00000000   04e2eae1 463cc999 e7786310 65b3dc49
philox4x32 10 00000000 80000000 00000000 00000000   00000001 00000000   34a4d61d 340e4017 f6945830 e9f52b96
philox4x32 10 00000000 00000000 ffffffff 00000000   00000001 00000000   fb0905e2 78378790 ca37926b cdf58cfa
philox4x32 10 00000000 00000000 80000000 00000000   00000001 00000000   f2e15c7d 3fedcd99 90046f6c 6657f0ca
philox4x32 10 00000000 00000000 00000000 ffffffff   00000001 00000000   f50c9398 b36cdab2 436bdc89 cc49431b
philox4x32 10 00000000 00000000 00000000 80000000   00000001 00000000   dde26e4e 17666f3b fc1f5b3a 83ac805d
philox4x32 10 243f6a88 85a308d3 13198a2e 03707344   00000001 00000000   38527b8f fad9a48c 20e675c0 f2fea26a
philox4x32 10 a4093822 299f31d0 082efa98 ec4e6c89   00000001 00000000   fb9877f8 482895e2 60b01453 198ea67b
philox4x32 10 452821e6 38d01377 be5466cf 34e90c6c   00000001 00000000   f7b7fa0a 8d970e2c 205c9c76 83b16ce5
philox4x32 10 00000001 00000000 00000000 00000000   00000000 80000000   e29b9f84 2903d316 42a1f56f 1ad02eab
philox4x32 10 00000000 00000001 00000000 00000000   00000000 80000000   94f419f8 1116c316 99f2fa30 bc048ad6
philox4x32 10 00000000 00000000 00000001 00000000   00000000 80000000   488b0258 9eea6420 afe7062e 768f5637
philox4x32 10 00000000 00000000 00000000 00000001   00000000 80000000   dbec6d70 69cea528 f7e22262 2e9f3e8f
philox4x32 10 00000000 ffffffff 00000000 00000000   00000000 80000000   905ee550 c7520e9a 9af9d0ad 69b97e98
philox4x32 10 00000000 80000000 00000000 00000000   00000000 80000000   1b89d963 0defe9af 60c9d3fb 3cfae97d
philox4x32 10 00000000 00000000 ffffffff 00000000   00000000 80000000   601b5460 fe29678b 54510a02 c72ed094
philox4x32 10 00000000 00000000 80000000 00000000   00000000 80000000   ae56ca02 7609ba67 25abd7df 46ce39a3
philox4x32 10 00000000 00000000 00000000 ffffffff   00000000 80000000   09812238 47b8470d 3e0d0a26 92d96c9a
philox4x32 10 00000000 00000000 00000000 80000000   00000000 80000000   f7a0b371 e51dc93d 56ce135d 1d4b5580
philox4x32 10 243f6a88 85a308d3 13198a2e 03707344   00000000 80000000   63675d2c 422d7c4d 3145d30d 3bce33a4
philox4x32 10 a4093822 299f31d0 082efa98 ec4e6c89   00000000 80000000   aa74e81c c9ddb97b 2c2cd881 9390c78d
philox4x32 10 452821e6 38d01377 be5466cf 34e90c6c   00000000 80000000   94ca5566 14924b2f 28214292 59faeaee
"""  # noqa: E501 (the table keeps Random123's line layout)


def _kat():
    out = []
    for line in KAT.strip().splitlines():
        f = line.split()
        words = [int(w, 16) for w in f[2:]]
        out.append((int(f[1]), words[0:4], words[4:6], words[6:10]))
    return out


@pytest.mark.parametrize("rounds,ctr,key,expected", _kat())
def test_known_answers(rounds, ctr, key, expected):
    got = philox4x32(np.array(ctr, np.uint32), np.array(key, np.uint32), rounds=rounds)
    assert [int(v) for v in got] == expected


def test_batched_counters_match_one_by_one():
    ten = [(c, k, e) for r, c, k, e in _kat() if r == 10]
    key = ten[-1][1]
    rows = [(c, e) for c, k, e in ten if k == key]
    batch = philox4x32(np.array([c for c, _ in rows], np.uint32), key)
    assert batch.shape == (len(rows), 4)
    assert batch.tolist() == [e for _, e in rows]
    # a leading 2-D batch shape is kept
    grid = np.array([c for c, _ in rows[:12]], np.uint32).reshape(3, 4, 4)
    assert philox4x32(grid, key).reshape(12, 4).tolist() == [e for _, e in rows[:12]]


def test_bad_counter_key_rounds():
    with pytest.raises(invalid_arguments, match="counter"):
        philox4x32(np.zeros(3, np.uint32), [0, 0])
    with pytest.raises(invalid_arguments, match="counter"):
        philox4x32([[-1, 0, 0, 0]], [0, 0])
    with pytest.raises(invalid_arguments, match="key"):
        philox4x32(np.zeros(4, np.uint32), [0, 0, 0])
    with pytest.raises(invalid_arguments, match="key"):
        philox4x32(np.zeros(4, np.uint32), [2**32, 0])
    with pytest.raises(invalid_arguments, match="rounds"):
        philox4x32(np.zeros(4, np.uint32), [0, 0], rounds=-1)


@pytest.mark.parametrize("seed,offset", [(0, 0), (7, 3), (2**32 + 5, 2**40 + 9),
                                         (2**64 - 1, 2**64 - 1)])
def test_counter_layout(seed, offset):
    """Word e comes from one scalar Philox call per element, built from the documented layout."""
    n = 11
    words = dropout_words(seed, offset, n)
    key = [seed % 2**32, seed >> 32]
    for e in range(n):
        g = e // 4
        ctr = [g % 2**32, g >> 32, offset % 2**32, offset >> 32]
        assert int(words[e]) == int(philox4x32(ctr, key)[e % 4])


def test_threshold_rounding():
    assert dropout_threshold(0.0) == 0
    assert dropout_threshold(2.0**-33) == 0  # 0.5 rounds to even
    assert dropout_threshold(3 * 2.0**-33) == 2  # 1.5 rounds to even
    assert dropout_threshold(5 * 2.0**-33) == 2  # 2.5 rounds to even
    assert dropout_threshold(0.5) == 2**31
    assert dropout_threshold(0.25) == 2**30
    assert dropout_threshold(1 - 2.0**-32) == 2**32 - 1
    assert dropout_threshold(1 - 2.0**-40) == 2**32 - 1  # clamped below 2**32
    assert dropout_scale(0.0) == np.float32(1.0)
    assert dropout_scale(0.5) == np.float32(2.0)
    assert dropout_scale(0.1) == np.float32(1 / 0.9)


def test_keep_is_word_at_least_threshold():
    """Placing the threshold exactly on an element's word keeps it; one above drops it."""
    seed, offset, n = 12345, 6, 9
    words = dropout_words(seed, offset, n)
    for e in range(n):
        w = int(words[e])
        if w == 0:
            continue
        assert dropout_keep(seed, offset, n, w / 2**32)[e]
        if w < 2**32 - 1:
            assert not dropout_keep(seed, offset, n, (w + 1) / 2**32)[e]


def test_p_zero_keeps_all_and_is_identity():
    x = np.random.default_rng(1).standard_normal((37, 29)).astype(np.float32)
    for seed in (0, 1, 2**63):
        assert dropout_keep(seed, 5, 1000, 0.0).all()
        y, mask = dropout_forward(x, seed, 5, 0.0)
        assert mask.dtype == np.uint8 and (mask == 1).all()
        assert np.array_equal(y.view(np.uint32), x.view(np.uint32))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_drop_rate_within_4_sigma(p):
    n = 200_003
    for seed, offset in ((0, 0), (987654321, 2**33 + 17)):
        dropped = int(n - np.count_nonzero(dropout_keep(seed, offset, n, p)))
        sigma = math.sqrt(n * p * (1 - p))
        assert abs(dropped - n * p) <= 4 * sigma, (seed, offset, dropped / n)


def test_same_seed_same_mask_other_seed_or_offset_other_mask():
    n, p = 4096, 0.5
    a = dropout_keep(42, 0, n, p)
    assert np.array_equal(a, dropout_keep(42, 0, n, p))
    for seed, offset in ((43, 0), (42, 1), (42 + 2**32, 0), (42, 2**32)):
        b = dropout_keep(seed, offset, n, p)
        # two independent masks agree on about half their elements
        assert 0.4 < np.mean(a == b) < 0.6, (seed, offset)
    # a shorter mask is a prefix of a longer one with the same seed and offset
    assert np.array_equal(dropout_keep(42, 0, 7, p), a[:7])


def test_scales_forward_backward_closed_form():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    p = 0.3
    keep = dropout_keep(9, 4, x.size, p)
    s = dropout_scales(9, 4, x.size, p)
    assert s.dtype == np.float32
    assert set(np.unique(s).tolist()) <= {0.0, float(np.float32(1 / 0.7))}
    assert np.array_equal(s != 0, keep)
    y, mask = dropout_forward(x, 9, 4, p)
    assert np.array_equal(mask.ravel().astype(bool), keep)
    assert np.array_equal(y, (x.ravel() * s).reshape(x.shape))
    dy = rng.standard_normal(x.shape).astype(np.float32)
    dy[~mask.astype(bool)] = np.inf  # dropped positions give 0 even for non-finite dy
    dx = dropout_backward(dy, mask, p)
    assert np.array_equal(dx[mask == 1], dy[mask == 1] * np.float32(1 / 0.7))
    assert (dx[mask == 0] == 0).all()


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5, float("nan"), "0.5", True, None])
def test_bad_p(p):
    with pytest.raises(invalid_arguments, match=r"\bp\b"):
        dropout_keep(0, 0, 4, p)
    with pytest.raises(invalid_arguments, match=r"\bp\b"):
        dropout_scale(p)


@pytest.mark.parametrize("name,seed,offset", [("seed", -1, 0), ("seed", 2**64, 0),
                                              ("seed", 1.0, 0), ("offset", 0, -1),
                                              ("offset", 0, 2**64)])
def test_bad_seed_offset(name, seed, offset):
    with pytest.raises(invalid_arguments, match=name):
        dropout_keep(seed, offset, 4, 0.5)


def test_bad_n_and_mask_shape():
    with pytest.raises(invalid_arguments, match=r"\bn\b"):
        dropout_keep(0, 0, -1, 0.5)
    with pytest.raises(invalid_arguments, match="mask"):
        dropout_backward(np.zeros(4, np.float32), np.zeros(3, np.uint8), 0.5)
