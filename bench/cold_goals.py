#!/usr/bin/python3
"""Issue 27's goals, checked against bench_cold.py's JSON reports (ratios of one run each).

    /usr/bin/python3 bench/cold_goals.py lat2.json [lat05.json ...]

For every report: per goal, how many cells meet it, and the ones that do not (cell, storage,
access, the ratio). Goals (issue 27, on the machine the report was made on):
  - full reads (mmap and read) at 2 ms: >= 3x h5py and >= 1.0x the direct reader;
  - full reads at 0.5 ms: >= 1.5x h5py;
  - random1 at 2 ms: >= 1.0x h5py;
  - random4: >= 3x h5py;
  - every cold cell: >= 1.0x h5py.
A benchmark aid only: prints, never fails.
"""
import json
import sys

FULL = ('mmap', 'read')


def goals(row):
    """(goal name, ratio, threshold) of the goals that apply to a row of the table."""
    lat, acc = row['latency_ms'], row['access']
    out = []
    if acc in FULL and lat == 2:
        out.append(('full read at 2 ms >= 3x h5py', row.get('x_h5py'), 3.0))
        out.append(('full read at 2 ms >= 1.0x direct', row.get('x_direct'), 1.0))
    if acc in FULL and lat == 0.5:
        out.append(('full read at 0.5 ms >= 1.5x h5py', row.get('x_h5py'), 1.5))
    if acc == 'random1' and lat == 2:
        out.append(('random1 at 2 ms >= 1.0x h5py', row.get('x_h5py'), 1.0))
    if acc == 'random4':
        out.append(('random4 >= 3x h5py', row.get('x_h5py'), 3.0))
    if row['cell'] != 'runopen':
        out.append(('every cell >= 1.0x h5py', row.get('x_h5py'), 1.0))
    return [g for g in out if g[1] is not None]


def main(paths):
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        print(f'# {path}')
        results = {}
        for row in report['table']:
            for name, ratio, need in goals(row):
                results.setdefault(name, []).append((ratio >= need, row, ratio))
        for name, rs in results.items():
            met = sum(ok for ok, _, _ in rs)
            print(f'{name}: {met} of {len(rs)}')
            for ok, row, ratio in rs:
                if not ok:
                    print(f'    {row["cell"]} | {row["storage"]} | {row["access"]}: {ratio:.2f}')


if __name__ == '__main__':
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
