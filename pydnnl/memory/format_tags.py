"""Format tags: oneDNN's names for memory layouts.

A tag is spelled canonically the way oneDNN spells it: one letter per logical dimension in
physical order from outermost to innermost (``a`` is dimension 0, ``b`` dimension 1, ...), an
upper-case letter for a dimension that is also blocked, then the inner blocks from outermost to
innermost as ``<size><letter>``. ``acdb`` is NHWC, ``aBcd16b`` is nChw16c, ``ABcd8b8a`` is
OIhw8i8o. Named tags (``nchw``, ``tnc``, ``ldigo``, ``OIhw8i8o``, ...) are aliases of canonical
ones. ``any`` lets a primitive choose; ``undef`` marks a zero descriptor.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from ..error import invalid_arguments

_LETTERS = "abcdefghijkl"


@dataclass(frozen=True)
class FormatTag:
    """One format tag: its name and its canonical spelling (``None`` for ``any``/``undef``)."""

    name: str
    canonical: str | None

    @property
    def ndims(self) -> int | None:
        return None if self.canonical is None else len(_parse(self.canonical)[0])

    def __repr__(self) -> str:
        return f"format_tag.{self.name}"

    def __str__(self) -> str:
        return self.name


_TAG_RE = re.compile(r"^([a-lA-L]+)((?:\d+[a-l])*)$")


def _parse(canonical: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Split a canonical tag into the outer dimension order and the inner blocks (size, dim)."""
    m = _TAG_RE.match(canonical)
    if not m:
        raise invalid_arguments(f"format tag {canonical!r}: not a valid oneDNN tag spelling")
    outer = [_LETTERS.index(c.lower()) for c in m.group(1)]
    if sorted(outer) != list(range(len(outer))):
        raise invalid_arguments(
            f"format tag {canonical!r}: each of the first {len(outer)} dimension letters must "
            f"appear exactly once")
    blocks = [(int(n), _LETTERS.index(c)) for n, c in re.findall(r"(\d+)([a-l])", m.group(2))]
    blocked = {d for _, d in blocks}
    for c, d in zip(m.group(1), outer):
        if c.isupper() != (d in blocked):
            raise invalid_arguments(
                f"format tag {canonical!r}: dimension {c.lower()!r} must be upper-case exactly "
                f"when it has an inner block")
    for size, _ in blocks:
        if size <= 1:
            raise invalid_arguments(f"format tag {canonical!r}: block sizes must be > 1")
    return outer, blocks


# Named aliases, as in oneDNN's dnnl.hpp.
_ALIASES = {
    "x": "a", "nc": "ab", "cn": "ba", "tn": "ab", "nt": "ba",
    "ncw": "abc", "nwc": "acb", "nchw": "abcd", "nhwc": "acdb", "chwn": "bcda",
    "ncdhw": "abcde", "ndhwc": "acdeb",
    "oi": "ab", "io": "ba", "oiw": "abc", "owi": "acb", "wio": "cba", "iwo": "bca",
    "oihw": "abcd", "hwio": "cdba", "ohwi": "acdb", "ihwo": "bcda", "iohw": "bacd",
    "oidhw": "abcde", "dhwio": "cdeba", "odhwi": "acdeb", "iodhw": "bacde", "idhwo": "bcdea",
    "goiw": "abcd", "gowi": "abdc", "wigo": "dcab", "giow": "acbd",
    "goihw": "abcde", "gohwi": "abdec", "hwigo": "decab", "giohw": "acbde",
    "goidhw": "abcdef", "godhwi": "abdefc", "dhwigo": "defcab", "giodhw": "acbdef",
    "tnc": "abc", "ntc": "bac",
    "ldnc": "abcd", "ldigo": "abcde", "ldgoi": "abdec", "ldio": "abcd", "ldoi": "abdc",
    "ldgo": "abcd", "ldc": "abc",
    # blocked
    "nCw8c": "aBc8b", "nCw16c": "aBc16b", "nChw8c": "aBcd8b", "nChw16c": "aBcd16b",
    "nCdhw8c": "aBcde8b", "nCdhw16c": "aBcde16b",
    "NCw16n16c": "ABc16a16b", "NChw16n16c": "ABcd16a16b", "NCdhw16n16c": "ABcde16a16b",
    "OIw8i8o": "ABc8b8a", "OIw16i16o": "ABc16b16a", "OIw8o8i": "ABc8a8b", "OIw16o16i": "ABc16a16b",
    "OIhw8i8o": "ABcd8b8a", "OIhw16i16o": "ABcd16b16a", "OIhw8o8i": "ABcd8a8b",
    "OIhw16o16i": "ABcd16a16b", "IOhw16o16i": "BAcd16a16b", "IOhw8o8i": "BAcd8a8b",
    "OIdhw8i8o": "ABcde8b8a", "OIdhw16i16o": "ABcde16b16a",
    "Owi8o": "Acb8a", "Owi16o": "Acb16a", "Ohwi8o": "Acdb8a", "Ohwi16o": "Acdb16a",
    "Odhwi8o": "Acdeb8a", "Odhwi16o": "Acdeb16a",
    "Oihw8o": "Abcd8a", "Oihw16o": "Abcd16a", "Ohwi32o": "Acdb32a",
    "gOIw8i8o": "aBCd8c8b", "gOIw16i16o": "aBCd16c16b",
    "gOIhw8i8o": "aBCde8c8b", "gOIhw16i16o": "aBCde16c16b", "gOIhw8o8i": "aBCde8b8c",
    "gOIhw16o16i": "aBCde16b16c", "gOIdhw8i8o": "aBCdef8c8b", "gOIdhw16i16o": "aBCdef16c16b",
    "Goiw8g": "Abcd8a", "Goiw16g": "Abcd16a", "Goihw8g": "Abcde8a", "Goihw16g": "Abcde16a",
    "Goidhw8g": "Abcdef8a", "Goidhw16g": "Abcdef16a",
    "ldgOi16o": "abdEc16e", "ldgOi32o": "abdEc32e", "ldOi16o": "abDc16d", "ldOi32o": "abDc32d",
    "ldgIo16i": "abdCe16c", "ldgIo32i": "abdCe32c",
}


class format_tag:
    """Namespace of format tags: ``format_tag.nchw``, ``format_tag.abcd``, ``format_tag.any``."""

    any = FormatTag("any", None)
    undef = FormatTag("undef", None)
    format_tag_undef = undef


def _register(name: str, canonical: str) -> None:
    setattr(format_tag, name, FormatTag(name, canonical))


for _r in range(1, 7):
    for _p in itertools.permutations(_LETTERS[:_r]):
        _register("".join(_p), "".join(_p))
for _name, _canon in _ALIASES.items():
    _register(_name, _canon)


def as_format_tag(x) -> FormatTag:
    """Accept a ``FormatTag`` or a tag name / canonical spelling; raise on anything else."""
    if isinstance(x, FormatTag):
        return x
    if isinstance(x, str):
        tag = getattr(format_tag, x, None)
        if isinstance(tag, FormatTag):
            return tag
        try:
            _parse(x)
        except invalid_arguments:
            raise invalid_arguments(
                f"format_tag: unknown tag {x!r}; expected a oneDNN tag name such as 'nchw', "
                f"'tnc', 'ldigo', 'nChw16c' or a canonical spelling such as 'acdb', 'aBcd8b'"
            ) from None
        return FormatTag(x, x)
    raise invalid_arguments(f"format_tag: expected a format_tag or a tag name, got {x!r}")


def parse_tag(tag: FormatTag) -> tuple[list[int], list[tuple[int, int]]]:
    """Outer dimension order and inner blocks ``[(size, dim), ...]`` of a concrete tag."""
    if tag.canonical is None:
        raise invalid_arguments(f"format tag {tag.name!r} describes no concrete layout")
    return _parse(tag.canonical)
