"""The science of AGIPD dark characterisation, shared by dark_characterisation.py (Dask, reads
through an h5direct mount) and dark_reference.py (serial h5py, the status quo).

Both scripts hand this module the same input for a memory cell — the data plane of that cell's
frames, one per train, in train order, as a C-contiguous (n, 512, 128) uint16 array — so the
constants they write are bit for bit identical.

Definitions, after European XFEL's offline calibration (pycalibration,
notebooks/AGIPD/Characterize_AGIPD_Gain_Darks_NBC.ipynb and its LPD sibling; BadPixels values
from European-XFEL/EXtra, src/extra/calibration):
- offset: mean over trains of the data plane (pycalibration takes the median; the mean is what
  the h5direct issue asks for), float64 -> stored float32;
- noise: standard deviation over trains (ddof=0, as numpy's std), from exact integer sums of
  values and squares, so the result is independent of frame order and of any split of the work;
- bad-pixel mask (uint32, BadPixels bits), per gain, cell and pixel:
  OFFSET_OUT_OF_THRESHOLD  offset outside median +- sigma * std over the cell's pixels, or
                           outside the hard range of the gain stage;
  NOISE_OUT_OF_THRESHOLD   the same for noise;
  OFFSET_NOISE_EVAL_ERROR  offset or noise not finite;
  NO_DARK_DATA             no frame of that cell in the run;
  DATA_STD_IS_ZERO         noise exactly 0 (a dead pixel).
"""
import json
from enum import IntFlag

import numpy as np

GAINS = ('high', 'medium', 'low')
DETECTOR = 'SPB_DET_AGIPD1M-1'


class BadPixels(IntFlag):
    """The European XFEL bad-pixel encoding (the bits used here; the full enum has 23)."""
    OFFSET_OUT_OF_THRESHOLD = 1 << 0
    NOISE_OUT_OF_THRESHOLD = 1 << 1
    OFFSET_NOISE_EVAL_ERROR = 1 << 2
    NO_DARK_DATA = 1 << 3
    DATA_STD_IS_ZERO = 1 << 14


# Defaults of the AGIPD dark notebook (sigma 5 around the median; hard ranges per gain stage).
DEFAULT_THRESHOLDS = {
    'offset_sigma': 5.0,
    'noise_sigma': 5.0,
    'offset_hard': {'high': [3000, 7000], 'medium': [6000, 10000], 'low': [6000, 10000]},
    'noise_hard': {'high': [4, 20], 'medium': [4, 20], 'low': [4, 20]},
}


def source_name(module):
    return f'{DETECTOR}/DET/{module}CH0:xtdf'


ACCUMULATE_FRAMES = 8  # frames per block of the int64 accumulation (8 x 512 KiB)


def characterise_cell(frames, gain, thresholds=DEFAULT_THRESHOLDS, shape=None):
    """frames: the data plane of one memory cell over n trains, in train order: a sequence of n
    (py, px) uint16 arrays (an (n, py, px) array, or a list of views into a memory map: nothing
    is copied but into a small int64 buffer).
    Returns offset (float32), noise (float32), badpix (uint32), each (py, px)."""
    n = len(frames)
    shape = tuple(shape if shape is not None else frames[0].shape)
    bp = np.zeros(shape, np.uint32)
    if n == 0:
        nan = np.full(shape, np.nan, np.float32)
        bp |= np.uint32(BadPixels.NO_DARK_DATA | BadPixels.OFFSET_NOISE_EVAL_ERROR)
        return nan, nan.copy(), bp
    # Exact integer sums of values and squares (int64: exact up to ~46000 frames), so the result
    # does not depend on the order of the frames nor on how they were split; then one rounding
    # each. Accumulated over blocks of frames in one small buffer (no large temporaries).
    s = np.zeros(shape, np.int64)
    ss = np.zeros(shape, np.int64)
    buf = np.empty((min(n, ACCUMULATE_FRAMES),) + shape, np.int64)
    for i in range(0, n, ACCUMULATE_FRAMES):
        k = min(ACCUMULATE_FRAMES, n - i)
        for j in range(k):
            np.copyto(buf[j], frames[i + j])
        t = buf[:k]
        s += t.sum(axis=0)
        np.multiply(t, t, out=t)
        ss += t.sum(axis=0)
    offset = s / n                                  # mean
    noise = np.sqrt((n * ss - s * s).astype(np.float64)) / n   # std, ddof=0 (as np.std)
    for value, name, flag in ((offset, 'offset', BadPixels.OFFSET_OUT_OF_THRESHOLD),
                              (noise, 'noise', BadPixels.NOISE_OUT_OF_THRESHOLD)):
        med = np.median(value)
        std = np.std(value)
        s = thresholds[name + '_sigma']
        lo, hi = thresholds[name + '_hard'][gain]
        bad = (value < med - s * std) | (value > med + s * std) | (value < lo) | (value > hi)
        bp[bad] |= np.uint32(flag)
    bp[~(np.isfinite(offset) & np.isfinite(noise))] |= np.uint32(BadPixels.OFFSET_NOISE_EVAL_ERROR)
    bp[noise == 0] |= np.uint32(BadPixels.DATA_STD_IS_ZERO)
    return offset.astype(np.float32), noise.astype(np.float32), bp


def characterise_cells(get_frames, cells, gain, thresholds=DEFAULT_THRESHOLDS, shape=None):
    """Runs characterise_cell for each cell; get_frames(cell) -> that cell's frames (see
    characterise_cell). Returns a dict of (len(cells), py, px) arrays and the frame count per
    cell."""
    out = {'offset': [], 'noise': [], 'badpix': [], 'n_frames': []}
    for c in cells:
        fr = get_frames(c)
        o, n, b = characterise_cell(fr, gain, thresholds, shape)
        out['offset'].append(o)
        out['noise'].append(n)
        out['badpix'].append(b)
        out['n_frames'].append(len(fr))
    return {k: np.stack(v) if k != 'n_frames' else np.array(v, np.uint32)
            for k, v in out.items()}


# --- output ------------------------------------------------------------------------------

FLAG_NAMES = [f.name for f in BadPixels]


class ConstantsFile:
    """The output HDF5 file (layout in docs/examples/README.md):

    /                          attrs: creator, runs (JSON {gain: path}), thresholds (JSON),
                               bad_pixel_flags (JSON {name: value}), gains, modules, cells
    /module_MM/offset          (3, cells, py, px) float32   gain, memory cell, slow scan, fast scan
    /module_MM/noise           (3, cells, py, px) float32
    /module_MM/badpix          (3, cells, py, px) uint32    BadPixels bits
    /module_MM/n_frames        (3, cells) uint32            frames (trains) used per gain and cell
                               attrs: source
    /statistics/GAIN/median_offset   (modules, cells) float64   over good pixels (badpix == 0)
    /statistics/GAIN/median_noise    (modules, cells) float64
    /statistics/GAIN/bad_pixels      (modules, cells) uint32    pixels with any flag
    /statistics/GAIN/flag_counts     (modules, flags) uint64    pixels x cells per flag
                               attrs: flags (names, the columns of flag_counts)
    /statistics/modules        (modules,) module numbers (rows of the tables)
    """

    def __init__(self, path, modules, cells, pixels, runs, thresholds, creator):
        import h5py
        self.f = h5py.File(path, 'w')
        self.modules = list(modules)
        self.cells = cells
        f = self.f
        f.attrs['creator'] = creator
        f.attrs['runs'] = json.dumps(runs)
        f.attrs['thresholds'] = json.dumps(thresholds)
        f.attrs['bad_pixel_flags'] = json.dumps({b.name: int(b) for b in BadPixels})
        f.attrs['gains'] = list(GAINS)
        f.attrs['modules'] = self.modules
        f.attrs['cells'] = cells
        shape = (len(GAINS), cells) + tuple(pixels)
        for m in self.modules:
            g = f.create_group(f'module_{m:02d}')
            g.attrs['source'] = source_name(m)
            g.create_dataset('offset', shape, np.float32, fillvalue=np.nan)
            g.create_dataset('noise', shape, np.float32, fillvalue=np.nan)
            g.create_dataset('badpix', shape, np.uint32)
            g.create_dataset('n_frames', shape[:2], np.uint32)

    def put(self, gain, module, cells, res):
        """Writes one result of characterise_cells (cells: a range of consecutive cells)."""
        gi = GAINS.index(gain)
        g = self.f[f'module_{module:02d}']
        c0, c1 = cells[0], cells[-1] + 1
        for k in ('offset', 'noise', 'badpix', 'n_frames'):
            g[k][gi, c0:c1] = res[k]

    def finish(self):
        """Statistics tables from the written constants; closes the file."""
        f = self.f
        st = f.create_group('statistics')
        st['modules'] = np.array(self.modules)
        nm = len(self.modules)
        for gi, gain in enumerate(GAINS):
            sg = st.create_group(gain)
            med_o = np.full((nm, self.cells), np.nan)
            med_n = np.full((nm, self.cells), np.nan)
            nbad = np.zeros((nm, self.cells), np.uint32)
            counts = np.zeros((nm, len(FLAG_NAMES)), np.uint64)
            for mi, m in enumerate(self.modules):
                g = f[f'module_{m:02d}']
                for c in range(self.cells):
                    o = g['offset'][gi, c]
                    n = g['noise'][gi, c]
                    b = g['badpix'][gi, c]
                    good = b == 0
                    if good.any():
                        med_o[mi, c] = np.median(o[good].astype(np.float64))
                        med_n[mi, c] = np.median(n[good].astype(np.float64))
                    nbad[mi, c] = np.count_nonzero(b)
                    for k, flag in enumerate(BadPixels):
                        counts[mi, k] += np.count_nonzero(b & np.uint32(flag))
            sg['median_offset'] = med_o
            sg['median_noise'] = med_n
            sg['bad_pixels'] = nbad
            sg['flag_counts'] = counts
            sg['flag_counts'].attrs['flags'] = FLAG_NAMES
        f.close()


def summary_table(path):
    """A markdown table of the statistics of an output file (per gain and module)."""
    import h5py
    lines = ['| gain | module | median offset (ADU) | median noise (ADU) | bad pixels (all cells) |',
             '|---|---|---|---|---|']
    with h5py.File(path, 'r') as f:
        mods = f['statistics/modules'][()]
        for gain in GAINS:
            sg = f[f'statistics/{gain}']
            for mi, m in enumerate(mods):
                lines.append(f'| {gain} | {m} | {np.nanmedian(sg["median_offset"][mi]):.1f} | '
                             f'{np.nanmedian(sg["median_noise"][mi]):.2f} | '
                             f'{int(sg["bad_pixels"][mi].sum())} |')
    return '\n'.join(lines)
