"""Plot benchdnn perf lines as pydnnl's speed relative to the peer, one bar per problem.

    python -m pydnnl.benchdnn --rnn --compare=torch --batch=benchmarks/rnn/inference.txt > cpu.txt
    python benchmarks/plot_results.py --out docs/img/rnn_vs_peers.png "CPU vs PyTorch"=cpu.txt ...
    python benchmarks/plot_results.py --out docs/img/conv.png FWD_B=fwd.txt BWD_D=bwd_d.txt ...

Each positional argument is ``LABEL=FILE``: a series of bars (one per perf line of the file
that has a peer time). Bars above 1 mean pydnnl is faster. Needs matplotlib.
"""
from __future__ import annotations

import argparse
import re

_NAME = re.compile(r'n"([^"]+)"')


# ResNet-50 list names: the model's prefix, shortened
_PREFIXES = (("resnet_50_v1_5:", "v1.5 "), ("resnet_50:", ""))


def read_perf(path: str) -> list[tuple[str, float]]:
    """(problem name, peer time / pydnnl time) of each perf line that has a peer comparison:
    the RNN and primitive drivers' ``speed_vs_<peer>=`` field, the conv driver's ``ratio=``."""
    out = []
    for line in open(path):
        if not line.startswith("perf,"):
            continue
        fields = line.strip().split(",")
        ratios = [f.split("=")[1].rstrip("x") for f in fields
                  if f.startswith("speed_vs_") or f.startswith("ratio=")]
        if not ratios:
            continue
        opts = fields[1]
        m = _NAME.search(line)
        name = m.group(1) if m else fields[2]
        for long, short in _PREFIXES:
            if name.startswith(long):
                name = short + name[len(long):]
        if opts.startswith("--rnn") and "BWD" in opts and "bwd" not in name:
            name += " fwd+bwd"
        if "--seq-lengths" in opts:
            name += " (lengths)"
        out.append((name, float(ratios[0])))
    return out


def main(argv=None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="pydnnl speed relative to the peer (higher is better)")
    ap.add_argument("series", nargs="+", help="LABEL=FILE")
    args = ap.parse_args(argv)
    series = []
    for s in args.series:
        label, _, path = s.partition("=")
        series.append((label, read_perf(path)))
    names = []
    for _, rows in series:
        names += [n for n, _ in rows if n not in names]
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(names) + 2), 4.5))
    # bars of the series that have a problem sit side by side, centred on its tick
    present = {n: [k for k, (_, rows) in enumerate(series) if n in dict(rows)] for n in names}
    width = 0.8 / max(len(v) for v in present.values())
    for k, (label, rows) in enumerate(series):
        vals = dict(rows)
        xs = [i + (present[n].index(k) - (len(present[n]) - 1) / 2) * width
              for i, n in enumerate(names) if n in vals]
        ax.bar(xs, [vals[n] for n in names if n in vals], width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("peer time / pydnnl time")
    ax.set_yscale("log")
    ax.set_title(args.title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
