#!/usr/bin/python3
"""Offset and noise maps of one module from a dark-characterisation output file, as a PNG.

    plot_dark_constants.py dark.h5 -o dark_module0.png [--module 0] [--cell 0]

Rows: high, medium, low gain; columns: offset map, noise map (one memory cell; the module's 512
x 128 pixels drawn as 128 rows x 512 columns; colour scale 1st-99th percentile so that bad pixels
do not wash it out; bad pixels of that cell circled), then the per-cell median offset and noise
of the module from /statistics.
"""
import argparse

import h5py
import numpy as np


def plot(path, out, module=0, cell=0):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    with h5py.File(path, 'r') as f:
        g = f[f'module_{module:02d}']
        gains = [x if isinstance(x, str) else x.decode() for x in f.attrs['gains']]
        offset = g['offset'][:, cell]
        noise = g['noise'][:, cell]
        badpix = g['badpix'][:, cell]
        mods = list(f['statistics/modules'][()])
        mi = mods.index(module)
        med_o = [f[f'statistics/{gn}/median_offset'][mi] for gn in gains]
        med_n = [f[f'statistics/{gn}/median_noise'][mi] for gn in gains]
        source = g.attrs['source']
    fig = plt.figure(figsize=(15, 8.5), constrained_layout=True)
    gs = fig.add_gridspec(len(gains), 3, width_ratios=[4, 4, 2.2])
    for gi, gain in enumerate(gains):
        for col, (arr, label, unit) in enumerate(((offset[gi], 'offset', 'ADU'),
                                                  (noise[gi], 'noise', 'ADU'))):
            ax = fig.add_subplot(gs[gi, col])
            lo, hi = np.nanpercentile(arr, [1, 99])
            im = ax.imshow(arr.T, origin='lower', aspect='auto', vmin=lo, vmax=hi,
                           cmap='viridis', interpolation='nearest')
            ys, xs = np.nonzero(badpix[gi])
            ax.scatter(ys, xs, s=30, facecolors='none', edgecolors='red', linewidths=0.8)
            ax.set_title(f'{gain} gain: {label}, cell {cell} ({len(ys)} bad pixels circled)',
                         fontsize=9)
            ax.set_xlabel('slow scan (512)', fontsize=8)
            ax.set_ylabel('fast scan (128)', fontsize=8)
            ax.tick_params(labelsize=7)
            cb = fig.colorbar(im, ax=ax, pad=0.01)
            cb.set_label(unit, fontsize=8)
            cb.ax.tick_params(labelsize=7)
        ax = fig.add_subplot(gs[gi, 2])
        ax.plot(med_o[gi], color='C0', label='median offset')
        ax.set_xlabel('memory cell', fontsize=8)
        ax.set_ylabel('median offset (ADU)', color='C0', fontsize=8)
        ax.tick_params(labelsize=7)
        ax2 = ax.twinx()
        ax2.plot(med_n[gi], color='C1', label='median noise')
        ax2.set_ylabel('median noise (ADU)', color='C1', fontsize=8)
        ax2.tick_params(labelsize=7)
        ax.set_title(f'{gain} gain: per-cell medians (good pixels)', fontsize=9)
    fig.suptitle(f'Dark characterisation, module {module} ({source})', fontsize=11)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('constants')
    ap.add_argument('-o', '--output', required=True)
    ap.add_argument('--module', type=int, default=0)
    ap.add_argument('--cell', type=int, default=0)
    a = ap.parse_args(argv)
    plot(a.constants, a.output, a.module, a.cell)


if __name__ == '__main__':
    main()
