#!/usr/bin/python3
"""AGIPD dark characterisation the usual way: serial h5py reads of the sequence files (no mount).

The status quo that dark_characterisation.py is compared with (same science, dark_common.py, so
the output is bit for bit the same). As European XFEL's dark notebook does it (pycalibration,
Characterize_AGIPD_Gain_Darks_NBC.ipynb: per module and sequence file, read
`image/data[first_index:last_index]` and `image/cellId` between the first and last indexed rows),
except that only the data plane is read (a hyperslab `[a:b, 0]`): for every run and module, the
module's sequence files are read in train order into memory, then each memory cell is
characterised.

    dark_reference.py RAW/r0010 RAW/r0011 RAW/r0012 -o dark_ref.h5
(run directories of the original files: RAW-R0010-AGIPD00-S00000.h5, ...)
"""
import argparse
import glob
import os.path as osp
import re
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import dark_common  # noqa: E402
from dark_common import GAINS, source_name  # noqa: E402


def module_files(run_dir, module):
    return sorted(glob.glob(osp.join(run_dir, f'RAW-R*-AGIPD{module:02d}-S*.h5')))


def find_modules(run_dir):
    mods = {int(m.group(1)) for p in glob.glob(osp.join(run_dir, 'RAW-R*-AGIPD*-S*.h5'))
            if (m := re.search(r'-AGIPD(\d+)-S\d+\.h5$', p))}
    return sorted(mods)


def read_module(run_dir, module):
    """Data plane (frames, py, px) uint16 and cellId (frames,) of one module over the run, in
    train order; and the bytes read."""
    src = source_name(module)
    blocks = []
    for path in module_files(run_dir, module):
        with h5py.File(path, 'r') as f:
            tids = f['INDEX/trainId'][()]
            ntrains = int(np.count_nonzero(tids))
            first = f[f'INDEX/{src}/image/first'][:ntrains]
            count = f[f'INDEX/{src}/image/count'][:ntrains]
            has = count > 0
            if not has.any():
                continue
            a = int(first[has][0])
            b = int(first[has][-1] + count[has][-1])
            grp = f[f'INSTRUMENT/{src}/image']
            data = grp['data'][a:b, 0]
            cid = grp['cellId'][a:b, 0]
            blocks.append((int(tids[:ntrains][has][0]), data, cid))
    blocks.sort(key=lambda x: x[0])
    if not blocks:
        return None, None
    data = np.concatenate([b[1] for b in blocks])
    cid = np.concatenate([b[2] for b in blocks])
    return data, cid


def run(a):
    runs = dict(zip(GAINS, (a.high, a.medium, a.low)))
    thresholds = dark_common.DEFAULT_THRESHOLDS
    modules = a.modules or find_modules(runs['high'])
    t0 = time.monotonic()
    out = None
    nbytes = 0
    for gain in GAINS:
        for m in modules:
            data, cid = read_module(runs[gain], m)
            nbytes += data.nbytes
            if out is None:
                ncells = a.cells or int(cid.max()) + 1
                out = dark_common.ConstantsFile(a.output, modules, ncells, data.shape[1:],
                                                {g: osp.abspath(r) for g, r in runs.items()},
                                                thresholds,
                                                'h5direct docs/examples/dark_reference.py')
            cells = list(range(ncells))
            res = dark_common.characterise_cells(
                lambda c: [data[r] for r in np.flatnonzero(cid == c)], cells, gain, thresholds,
                shape=data.shape[1:])
            out.put(gain, m, cells, res)
            data = cid = None  # free before reading the next module
    out.finish()
    wall = time.monotonic() - t0
    print(f'{len(modules)} modules x {ncells} cells x 3 gains: read {nbytes / 1e9:.2f} GB '
          f'(data planes) in {wall:.1f} s wall ({nbytes / 1e9 / wall:.2f} GB/s) -> {a.output}')
    if a.summary:
        print(dark_common.summary_table(a.output))
    return wall


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('high', help='high-gain run directory (original files)')
    ap.add_argument('medium')
    ap.add_argument('low')
    ap.add_argument('-o', '--output', required=True)
    ap.add_argument('--modules', type=int, nargs='+')
    ap.add_argument('--cells', type=int)
    ap.add_argument('--summary', action='store_true')
    run(ap.parse_args(argv))


if __name__ == '__main__':
    main()
