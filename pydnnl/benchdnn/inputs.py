"""Reading oneDNN benchdnn input files unchanged: tokens, nested ``--batch``, value lists.

An input file holds ``--option=value`` tokens and problem descriptors separated by white
space; ``#`` starts a comment (outside double quotes), a line ending in ``\\`` continues on
the next one, and ``--batch=FILE`` includes FILE relative to the including file. A value may
be a comma-separated list: each problem runs once per element of the cross product of the
lists in effect (:func:`expand`).
"""
from __future__ import annotations

import itertools
import os

from ..error import invalid_arguments


def _strip_comment(line: str) -> str:
    quoted = False
    for i, ch in enumerate(line):
        if ch == '"':
            quoted = not quoted
        elif ch == "#" and not quoted:
            return line[:i]
    return line


def _split(text: str) -> list[str]:
    """White-space separated tokens; quoted parts keep their spaces."""
    out, cur, quoted = [], "", False
    for ch in text:
        if ch == '"':
            quoted = not quoted
            cur += ch
        elif ch.isspace() and not quoted:
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        out.append(cur)
    return out


def file_tokens(path: str | os.PathLike, depth: int = 0) -> list[str]:
    """The tokens of an input file with its ``--batch`` includes replaced by their tokens."""
    if depth > 16:
        raise invalid_arguments(f"--batch: nesting deeper than 16 at {path}")
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise invalid_arguments(f"--batch: cannot read {path!r}: {e.strerror}") from None
    joined = ""
    for line in text.splitlines():
        line = _strip_comment(line).rstrip()
        # a trailing backslash joins the next line (oneDNN splits long value lists this way)
        joined += line[:-1] + " " if line.endswith("\\") else line + "\n"
    # values split over continued lines read "a, \ b": drop the spaces after commas
    toks: list[str] = []
    for tok in _split(joined):
        if toks and toks[-1].startswith("--") and toks[-1].endswith(",") \
                and not tok.startswith("--"):
            toks[-1] += tok
        else:
            toks.append(tok)
    return expand_batches(toks, os.path.dirname(path), depth + 1)


def expand_batches(argv: list[str], base_dir: str = "", depth: int = 0) -> list[str]:
    """``argv`` with each ``--batch=FILE`` replaced by FILE's tokens (FILE relative to
    ``base_dir``, then to the working directory)."""
    out: list[str] = []
    for a in argv:
        if a.startswith("--batch="):
            name = a.split("=", 1)[1]
            if not name:
                raise invalid_arguments("--batch: expected a file name, got an empty value")
            path = name
            if base_dir and not os.path.isabs(name) and os.path.exists(
                    os.path.join(base_dir, name)):
                path = os.path.join(base_dir, name)
            out += file_tokens(path, depth)
        else:
            out.append(a)
    return out


def split_values(value: str) -> list[str]:
    """The elements of a comma-separated option value (``"a,,b"`` -> ``["a", "", "b"]``)."""
    return [v.strip() for v in value.split(",")]


def expand(opts: dict[str, str]) -> list[dict[str, str]]:
    """Every combination of the options' comma-separated values, the first option slowest."""
    keys = list(opts)
    lists = [split_values(opts[k]) for k in keys]
    return [dict(zip(keys, combo)) for combo in itertools.product(*lists)]


def parse_bool(key: str, value: str) -> bool:
    """benchdnn's boolean spellings; raises invalid_arguments naming the option."""
    v = value.strip().lower()
    if v in ("true", "1", ""):
        return True
    if v in ("false", "0"):
        return False
    raise invalid_arguments(f"{key}: expected true or false, got {value!r}")


def random_problems(driver: str, n: int, seed: int) -> list[str]:
    """``n`` seeded random problem descriptors of ``driver`` (``--random=N --seed=S``): small
    shapes that oneDNN's consistency rules accept, so each one runs (options give the
    algorithms, directions and kinds to cross them with)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        r = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
        if driver == "rnn":
            l, t, mb, sic = r(1, 2), r(1, 4), r(1, 4), r(1, 12)
            slc = sic if l > 1 else r(1, 12)
            out.append(f'l{l}t{t}mb{mb}sic{sic}slc{slc}dhc{sic}dic{sic}n"random:{seed}:{i}"')
        elif driver in ("conv", "deconv"):
            nd, g = r(1, 3), r(1, 2)
            desc = f"g{g}mb{r(1, 3)}ic{g * r(1, 6)}oc{g * r(1, 6)}"
            for d in "dhw"[3 - nd:]:
                k, s, dil = r(1, 3), r(1, 2), r(0, 1)
                ext = (k - 1) * (dil + 1) + 1
                p = r(0, ext - 1)
                size = r(ext, 9)
                desc += f"_i{d}{size}k{d}{k}s{d}{s}d{d}{dil}p{d}{p}"
            out.append(desc + f'_n"random:{seed}:{i}"')
        else:
            raise invalid_arguments(f"--random: expected the rnn, conv or deconv driver, "
                                    f"got {driver}")
    return out
