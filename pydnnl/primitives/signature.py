"""oneDNN's call forms of a primitive descriptor, declared once, and the one matcher binding a
call's ``*args, **kwargs`` to argument names.

A :class:`Signature` lists the leading arguments every form starts with (``head``), the
positional overloads oneDNN's C++ API has for what follows (``forms``: with or without bias,
dilates, peephole weights, ...), optional trailing positionals (``tail``: ``hint_fwd_pd``,
``attr``, ...) and keyword-only extensions. Positional values choose the overload by their
:class:`Kind`: a desc, a list of ints, an attr. The first form (in declaration order) that the
positional values fit, completed by keywords, wins; a call with no positional value after the
head is a keyword call and may leave out the ``optional`` names (they default to None).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ..attr import primitive_attr
from ..error import invalid_arguments
from ..memory import memory
from ..memory.desc import MemoryDesc
from .base import primitive_desc_base


@dataclass(frozen=True)
class Kind:
    """What a positional value must be to stand for an argument (overload resolution)."""

    label: str                      # plural, in counts: "memory descs"
    what: str                       # singular, in messages: "a memory.desc or None"
    accepts: Callable[[Any], bool]
    specific: bool = True           # False for ANY: accepting a value proves nothing


def _is_dims(x) -> bool:
    if isinstance(x, np.ndarray):
        return x.ndim == 1 and np.issubdtype(x.dtype, np.integer)
    return isinstance(x, (list, tuple)) and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in x)


ANY = Kind("arguments", "anything", lambda v: True, specific=False)
DESC = Kind("memory descs", "a memory.desc or None",
            lambda v: v is None or isinstance(v, MemoryDesc))
DIMS = Kind("lists", "a list of ints", _is_dims)
ATTR = Kind("attrs", "a primitive_attr or None",
            lambda v: v is None or isinstance(v, primitive_attr))
PD = Kind("primitive descriptors", "a primitive descriptor or None",
          lambda v: v is None or isinstance(v, primitive_desc_base))
MEMORY = Kind("memories", "a pydnnl.memory", lambda v: isinstance(v, memory))
NUMBER = Kind("numbers", "a number",
              lambda v: isinstance(v, (int, float, np.number)) and not isinstance(v, bool))
BOOL = Kind("bools", "a bool", lambda v: isinstance(v, (bool, np.bool_)))


def _by_convention(name: str) -> Kind:
    if name.endswith("_desc"):
        return DESC
    return {"attr": ATTR, "hint_fwd_pd": PD}.get(name, ANY)


@dataclass(frozen=True)
class Signature:
    """The call forms of one primitive descriptor (see the module docstring).

    ``kinds`` overrides the convention (``*_desc``: :data:`DESC`, ``attr``: :data:`ATTR`,
    ``hint_fwd_pd``: :data:`PD`, anything else: :data:`ANY`); ``defaults`` gives tail,
    keyword-only and optional names a value other than None; ``aliases`` maps other keyword
    spellings (oneDNN's ``aengine``) to names.
    """

    name: str
    head: tuple[str, ...]
    forms: tuple[tuple[str, ...], ...]
    tail: tuple[str, ...] = ()
    keyword_only: tuple[str, ...] = ()
    optional: frozenset[str] = frozenset()
    aliases: Mapping[str, str] = field(default_factory=dict)
    kinds: Mapping[str, Kind] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)

    def kind(self, name: str) -> Kind:
        return self.kinds.get(name) or _by_convention(name)

    @property
    def form_names(self) -> tuple[str, ...]:
        """Every name of every form, first appearance first."""
        return tuple(dict.fromkeys(n for f in self.forms for n in f))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.head + self.form_names + self.tail + self.keyword_only))

    def describe(self) -> str:
        """The positional forms, merged where each is a subsequence of the longest."""
        tail = "".join(f"[, {n}" for n in self.tail) + "]" * len(self.tail)
        groups = [self.forms] if _nested(self.forms) else [(f,) for f in self.forms]
        return " or ".join(f"({', '.join(self.head + (_listing(g),))}{tail})" for g in groups)


def _nested(forms) -> bool:
    longest = max(forms, key=len)
    return all(_subsequence(f, longest) for f in forms)


def _subsequence(short, long) -> bool:
    it = iter(long)
    return all(n in it for n in short)


def _listing(forms) -> str:
    """Names of nested forms in order, ``[name,]`` for those some forms leave out."""
    longest = max(forms, key=len)
    parts = []
    for i, n in enumerate(longest):
        last = i == len(longest) - 1
        if all(n in f for f in forms):
            parts.append(n if last else n + ",")
        else:
            parts.append(f"[{n}]" if last else f"[{n},]")
    return " ".join(parts)


def _counts(ns) -> str:
    ns = [str(n) for n in sorted(set(ns))]
    return ns[0] if len(ns) == 1 else ", ".join(ns[:-1]) + " or " + ns[-1]


def _show(v) -> str:
    r = repr(v)
    return r if len(r) <= 60 and "\n" not in r else f"a {type(v).__name__}"


def bind(sig: Signature, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Bind a call to ``sig``'s names: ``{name: value}`` for the head, the chosen form, the
    tail and the keyword-only names (defaults filled in); raises :class:`invalid_arguments`
    naming the argument, what was expected and what came."""
    where = sig.name
    kw = _canonical_keywords(sig, kwargs)
    out = dict(zip(sig.head, args))
    rest = tuple(args[len(sig.head):])
    for n in sig.head:
        if n in kw:
            if n in out:
                raise invalid_arguments(f"{where}: {n} given twice (positionally and by keyword)")
            out[n] = kw.pop(n)
    missing = [n for n in sig.head if n not in out]
    if missing:
        raise invalid_arguments(f"{where}: missing {', '.join(missing)}; expected "
                                f"{sig.describe()}")
    form = _keyword_form(sig, kw) if not rest else _positional_form(sig, rest, kw)
    for n in form + sig.tail + sig.keyword_only:
        out[n] = sig.defaults.get(n)
    out.update(zip(form + sig.tail, rest))
    out.update(kw)
    for n, v in out.items():
        if isinstance(v, (MemoryDesc, memory)) and v.is_host_scalar():
            what = "memory.desc" if isinstance(v, MemoryDesc) else "memory"
            raise invalid_arguments(
                f"{where}: {n} is {v!r}; a host scalar serves only as a scale or zero point "
                f"passed at execute (primitive_attr.set_host_scale / set_host_zero_point), "
                f"expected a tensor's {what}")
    return out


def _canonical_keywords(sig: Signature, kwargs: dict) -> dict:
    known = set(sig.names)
    kw, spelled = {}, {}
    unknown = []
    for k, v in kwargs.items():
        n = sig.aliases.get(k, k)
        if n not in known:
            unknown.append(k)
            continue
        if n in kw:
            raise invalid_arguments(f"{sig.name}: {n} given twice (as {spelled[n]} and {k})")
        kw[n], spelled[n] = v, k
    if unknown:
        raise invalid_arguments(f"{sig.name}: unknown keyword argument(s) {', '.join(unknown)}; "
                                f"it takes {', '.join(sig.names)}")
    return kw


def _keyword_form(sig: Signature, kw: dict) -> tuple[str, ...]:
    given = [k for k in kw if k in sig.form_names]
    form = next((f for f in sig.forms if all(k in f for k in given)), None)
    if form is None:
        raise invalid_arguments(f"{sig.name}: no form takes keywords {', '.join(given)} "
                                f"together; expected {sig.describe()}")
    missing = [n for n in form if n not in kw and n not in sig.optional]
    if missing:
        raise invalid_arguments(f"{sig.name}: missing {', '.join(missing)}; expected "
                                f"{sig.describe()}")
    return form


@dataclass
class _Try:
    """How ``rest`` fits one form: the count of leading values their kinds accept, and the
    problem (None when the form fits)."""

    form: tuple[str, ...]
    prefix: int
    problem: str | None = None
    names: tuple[str, ...] = ()


def _try(sig: Signature, form: tuple[str, ...], rest: tuple, kw: dict) -> _Try:
    slots = form + sig.tail
    prefix = 0
    while prefix < min(len(rest), len(slots)) and sig.kind(slots[prefix]).accepts(rest[prefix]):
        prefix += 1
    if prefix < len(rest):
        return _Try(form, prefix, "kind")
    foreign = tuple(k for k in kw if k in sig.form_names and k not in form)
    if foreign:
        return _Try(form, prefix, "foreign", foreign)
    missing = tuple(n for n in form[len(rest):] if n not in kw)
    if missing:
        return _Try(form, prefix, "incomplete", missing)
    dups = tuple(n for n in slots[:len(rest)] if n in kw)
    if dups:
        return _Try(form, prefix, "dup", dups)
    return _Try(form, prefix)


def _positional_form(sig: Signature, rest: tuple, kw: dict) -> tuple[str, ...]:
    tries = [_try(sig, f, rest, kw) for f in sig.forms]
    for t in tries:
        if t.problem is None:
            return t.form
    for t in tries:
        if t.problem == "dup":
            raise invalid_arguments(f"{sig.name}: {', '.join(t.names)} given twice "
                                    f"(positionally and by keyword)")
    # closest: the most values accepted, then a form consumed whole (the value it rejects is in
    # the tail), then the fewest names missing
    best = max(tries, key=lambda t: (t.prefix, t.prefix >= len(t.form), -len(t.names)))
    if best.problem == "kind":
        raise invalid_arguments(_kind_message(sig, best, rest))
    if best.problem == "foreign":
        others = " or ".join(f"({', '.join(f)})" for f in sig.forms
                             if any(k in f for k in best.names))
        raise invalid_arguments(
            f"{sig.name}: unknown keyword {best.names[0]!r} for the positional form "
            f"({', '.join(best.form)}); it belongs to {others}")
    first = best.form.index(best.names[0])
    raise invalid_arguments(f"{sig.name}: missing {', '.join(best.names)}: "
                            + _count_message(sig, best.form, first, first - _run_start(
                                sig, best.form, first)))


def _run_start(sig: Signature, form: tuple[str, ...], i: int) -> int:
    """Where the run of same-kind names holding ``form[i]`` starts."""
    k = sig.kind(form[i])
    while i > 0 and sig.kind(form[i - 1]) is k:
        i -= 1
    return i


def _count_message(sig: Signature, form: tuple[str, ...], i: int, got: int) -> str:
    """'expected <label> <names of that run in every form> (<counts>), got <got>'."""
    start = _run_start(sig, form, i)
    kind = sig.kind(form[i])
    index = len(_runs(sig, form[:start]))
    runs = []
    for f in sig.forms:
        fr = _runs(sig, f)
        if index < len(fr) and sig.kind(fr[index][0]) is kind:
            runs.append(fr[index])
    names = _listing(runs) if _nested(runs) else ", ".join(form[start:])
    return (f"expected {kind.label} {names} ({_counts(len(r) for r in runs)} of them), "
            f"got {got}")


def _runs(sig: Signature, form: tuple[str, ...]) -> list[tuple[str, ...]]:
    out: list[list[str]] = []
    for n in form:
        if out and sig.kind(out[-1][-1]) is sig.kind(n):
            out[-1].append(n)
        else:
            out.append([n])
    return [tuple(r) for r in out]


def _kind_message(sig: Signature, t: _Try, rest: tuple) -> str:
    """A positional value no slot of the closest form accepts: a run too long or too short,
    or a value of no expected kind."""
    i, slots = t.prefix, t.form + sig.tail
    v = rest[i]
    if i > 0 and i - 1 < len(t.form):
        prev = sig.kind(t.form[i - 1])
        if prev.specific and prev.accepts(v) and (i >= len(t.form)
                                                  or sig.kind(t.form[i]) is not prev):
            start = _run_start(sig, t.form, i - 1)
            n = start
            while n < len(rest) and prev.accepts(rest[n]):
                n += 1
            return f"{sig.name}: " + _count_message(sig, t.form, i - 1, n - start)
    if i < len(t.form):
        here = sig.kind(t.form[i])
        later = [sig.kind(s) for s in slots[i + 1:]]
        if any(k.specific and k is not here and k.accepts(v) for k in later):
            start = _run_start(sig, t.form, i)
            return f"{sig.name}: " + _count_message(sig, t.form, i, i - start)
    name = slots[i] if i < len(slots) else None
    if name is None:
        return (f"{sig.name}: unexpected positional argument {_show(v)} (too many: "
                f"{len(rest)} after the head); expected {sig.describe()}")
    return (f"{sig.name}: unexpected positional argument {_show(v)} for {name} (expected "
            f"{sig.kind(name).what}); expected {sig.describe()}")


__all__ = ["Kind", "Signature", "bind", "ANY", "DESC", "DIMS", "ATTR", "PD", "MEMORY", "NUMBER",
           "BOOL"]
