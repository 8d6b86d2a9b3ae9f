#!/usr/bin/env python3
"""The cold matrix as a plot: h5direct's speed over h5py's for every cell, access and storage.

bench_cold.py --plot draws the storages of its own run; this draws the storages of several runs
(one JSON report each, bench_cold.py --json), as when the matrix is measured one storage setting
at a time:

    bench/plot_cold.py OUT.png REPORT.json [REPORT.json ...]
"""
import json
import sys


def plot(table, out, title):
    """Horizontal bars of x_h5py (h5py seconds / h5direct seconds) per cell and access, one bar
    per storage setting; the runopen rows (no h5py reader) are left out."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    rows = [r for r in table if 'access' in r]
    labels, names = [], []
    for r in rows:
        lab = f"{r['cell']} {r['access']}"
        if lab not in labels:
            labels.append(lab)
        if r['storage'] not in names:
            names.append(r['storage'])
    by = {(f"{r['cell']} {r['access']}", r['storage']): r['x_h5py'] for r in rows if r['x_h5py'] is not None}
    fig, ax = plt.subplots(figsize=(10, max(4, 0.22 * len(labels) * max(1, len(names) / 2))))
    h = 0.8 / max(1, len(names))
    for k, sname in enumerate(names):
        xs = [by.get((lab, sname), 0.0) for lab in labels]
        ax.barh([i + k * h for i in range(len(labels))], xs, height=h, label=sname)
    ax.set_yticks([i + 0.4 - h / 2 for i in range(len(labels))])
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.axvline(1.0, color='k', lw=1)
    ax.set_xlabel('x h5py (h5py seconds / h5direct seconds; > 1: h5direct faster), cold')
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == '__main__':
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    table, machines = [], []
    for path in sys.argv[2:]:
        with open(path) as f:
            rep = json.load(f)
        table += rep['table']
        if rep.get('machine') not in machines:
            machines.append(rep.get('machine'))
    plot(table, sys.argv[1], 'cold reads from emulated storage; ' + '; '.join(str(m) for m in machines))
