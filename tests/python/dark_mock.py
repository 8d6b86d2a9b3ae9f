#!/usr/bin/python3
"""Generator of AGIPD dark runs (the input of dark characterisation) in the European XFEL layout.

Three runs, one per gain stage (high, medium, low), written with euxfel_mock's RunWriter and
detector_module(): per module the source `SPB_DET_AGIPD1M-1/DET/{m}CH0:xtdf` in aggregator
`AGIPD{m:02d}`, several sequence files per module (breaking at different trains per module),
INDEX per module and index group, datasets padded beyond the index, raw `image.data`
(N, 2, PY, PX) uint16 (plane 0: data, plane 1: gain), one frame per chunk, uncompressed, and
`image.cellId`, `image.pulseId`, `image.trainId` (N, 1). Every train holds one frame per memory
cell (cellId 0..cells-1, pulseId 0..cells-1); optionally one module misses one train (count 0).

Content (the truth, saved next to the runs): for every module, gain, cell and pixel an offset and
a noise (ADU); frame values are round(offset + noise * z), z ~ N(0, 1), independent per frame and
pixel. The gain plane holds the raw gain value of the stage (a per-pixel level + small noise).
Planted bad pixels (the same pixels in every cell and gain): dead (noise 0: constant value),
hot (offset 15000 ADU, beyond every hard offset threshold), noisy (noise 80 ADU); plus a few
pixels noisy in one cell only.

Typical values (ADU) are chosen inside the hard thresholds of European XFEL's AGIPD dark
notebook (pycalibration, notebooks/AGIPD/Characterize_AGIPD_Gain_Darks_NBC.ipynb: offset
HG 3000-7000, MG/LG 6000-10000; noise 4-20).

    dark_mock.py OUTDIR [--modules 4] [--cells 64] [--trains 120] [--pixels 512x128]
                        [--trains-per-file 40] [--seed 1]
writes OUTDIR/raw/r0010 (high), r0011 (medium), r0012 (low), OUTDIR/truth.h5 and
OUTDIR/dark_runs.json (run paths, sizes, planted pixels).

truth.h5: offset, noise, gain_level (module, gain, cell, y, x) float32; dead, hot, noisy,
noisy_cell: (n, 4) int32 rows (module, cell, y, x) (`dead`/`hot`/`noisy` list cell -1: every
cell); attrs: modules, cells, trains, gains.
"""
import argparse
import json
import os.path as osp
import sys

import h5py
import numpy as np

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import euxfel_mock  # noqa: E402

GAINS = ('high', 'medium', 'low')
RUN_NUMBERS = (10, 11, 12)
DETECTOR = 'SPB_DET_AGIPD1M-1'
# per gain: offset level, pixel-to-pixel spread, noise level, its spread, raw gain level
GAIN_MODEL = {
    'high': dict(offset=5000., offset_px=150., noise=12., noise_px=0.5, gain_level=4800.),
    'medium': dict(offset=7500., offset_px=150., noise=11., noise_px=0.5, gain_level=6800.),
    'low': dict(offset=8500., offset_px=150., noise=10., noise_px=0.5, gain_level=8800.),
}
HOT_OFFSET = 15000.
NOISY_NOISE = 80.
POOL = 1 << 20  # standard normals drawn once; a frame takes a random window of the pool


def source_name(module):
    return f'{DETECTOR}/DET/{module}CH0:xtdf'


class DarkModel:
    """Truth for all modules and gains; frame generation from it."""

    def __init__(self, modules=4, cells=64, pixels=(512, 128), seed=1, n_bad=(3, 3, 3, 2)):
        self.modules = list(range(modules)) if isinstance(modules, int) else list(modules)
        self.cells = cells
        self.pixels = tuple(pixels)
        self.seed = seed
        py, px = self.pixels
        rng = np.random.default_rng([seed, 12345])
        nm = len(self.modules)
        shape = (nm, len(GAINS), cells, py, px)
        self.offset = np.empty(shape, np.float32)
        self.noise = np.empty(shape, np.float32)
        self.gain_level = np.empty(shape, np.float32)
        yy, xx = np.mgrid[0:py, 0:px]
        for mi in range(nm):
            for gi, g in enumerate(GAINS):
                p = GAIN_MODEL[g]
                # ASIC structure (64x64 blocks) + pixel spread + a per-cell drift
                asic = rng.normal(0, p['offset_px'] / 2, size=((py + 63) // 64, (px + 63) // 64))
                base = p['offset'] + asic[yy // 64, xx // 64] \
                    + rng.normal(0, p['offset_px'] / 2, size=(py, px))
                drift = 30. * np.sin(np.arange(cells) / 7. + mi + gi)
                self.offset[mi, gi] = base[None] + drift[:, None, None] \
                    + rng.normal(0, 5., size=(cells, py, px))
                nbase = p['noise'] + rng.normal(0, p['noise_px'], size=(py, px))
                self.noise[mi, gi] = nbase[None] * (1 + 0.02 * np.cos(np.arange(cells) / 5.)
                                                    )[:, None, None]
                self.gain_level[mi, gi] = p['gain_level'] + rng.normal(0, 100., size=(py, px))[None]
        # Planted bad pixels: distinct pixels per module, away from each other
        n_dead, n_hot, n_noisy, n_noisy_cell = n_bad
        total = n_dead + n_hot + n_noisy + n_noisy_cell
        self.dead, self.hot, self.noisy, self.noisy_cell = [], [], [], []
        for mi in range(nm):
            flat = rng.choice(py * px, size=total, replace=False)
            ys, xs = np.unravel_index(flat, (py, px))
            pts = list(zip(ys.tolist(), xs.tolist()))
            for y, x in pts[:n_dead]:
                self.noise[mi, :, :, y, x] = 0
                self.dead.append((mi, -1, y, x))
            for y, x in pts[n_dead:n_dead + n_hot]:
                self.offset[mi, :, :, y, x] = HOT_OFFSET
                self.hot.append((mi, -1, y, x))
            for y, x in pts[n_dead + n_hot:n_dead + n_hot + n_noisy]:
                self.noise[mi, :, :, y, x] = NOISY_NOISE
                self.noisy.append((mi, -1, y, x))
            for k, (y, x) in enumerate(pts[n_dead + n_hot + n_noisy:]):
                c = int(rng.integers(0, cells))
                self.noise[mi, :, c, y, x] = NOISY_NOISE
                self.noisy_cell.append((mi, c, y, x))
        # Dead pixels read a constant: make their offset an integer so the value is exact
        for mi, _, y, x in self.dead:
            self.offset[mi, :, :, y, x] = np.round(self.offset[mi, :, :, y, x])
        npx = py * px
        self.pool = np.random.default_rng([seed, 777]).standard_normal(POOL + npx,
                                                                      dtype=np.float32)

    def frames(self, mi, gi, tids, js):
        """Rows (n, 2, py, px) uint16 for module index mi, gain index gi: the frames js (memory
        cell js % cells) of trains tids. Deterministic per (seed, module, gain, train)."""
        py, px = self.pixels
        npx = py * px
        n = len(tids)
        out = np.empty((n, 2, py, px), np.uint16)
        tids = np.asarray(tids, np.int64)
        js = np.asarray(js, np.int64)
        buf = np.empty((py, px), np.float32)
        starts = {}
        for t in np.unique(tids):
            r = np.random.default_rng([self.seed, self.modules[mi], gi, int(t)])
            starts[int(t)] = r.integers(0, POOL, size=(2, self.cells + 1))
        for r_, (t, j) in enumerate(zip(tids.tolist(), js.tolist())):
            c = j % self.cells
            s = starts[t]
            k0, k1 = int(s[0, c]), int(s[1, c])
            np.multiply(self.pool[k0:k0 + npx].reshape(py, px), self.noise[mi, gi, c], out=buf)
            buf += self.offset[mi, gi, c]
            np.rint(buf, out=buf)
            np.clip(buf, 0, 65535, out=buf)
            out[r_, 0] = buf
            np.multiply(self.pool[k1:k1 + npx].reshape(py, px), 15., out=buf)
            buf += self.gain_level[mi, gi, c]
            np.rint(buf, out=buf)
            np.clip(buf, 0, 65535, out=buf)
            out[r_, 1] = buf
        return out

    def save_truth(self, path, trains):
        with h5py.File(path, 'w') as f:
            f['offset'] = self.offset
            f['noise'] = self.noise
            f['gain_level'] = self.gain_level
            for name in ('dead', 'hot', 'noisy', 'noisy_cell'):
                f[name] = np.array(getattr(self, name), np.int32).reshape(-1, 4)
            f.attrs['modules'] = self.modules
            f.attrs['cells'] = self.cells
            f.attrs['trains'] = trains
            f.attrs['gains'] = list(GAINS)


def dark_module_source(model, mi, gi):
    """euxfel_mock's raw AGIPD module with dark content for the image keys."""
    py, px = model.pixels
    src = euxfel_mock.detector_module(f'{DETECTOR}/DET/{model.modules[mi]}CH0',
                                      lambda t: model.cells, image_dims=(2, py, px))
    makers = {
        'image.data': lambda t, j: model.frames(mi, gi, t, j),
        'image.cellId': lambda t, j: (np.asarray(j) % model.cells).astype('u2')[:, None],
        'image.pulseId': lambda t, j: np.asarray(j, 'u8')[:, None],
        'image.trainId': lambda t, j: np.asarray(t, 'u8')[:, None],
        'image.length': lambda t, j: np.full((len(t), 1), py * px * 4, 'u4'),
        'image.status': lambda t, j: np.zeros((len(t), 1), 'u2'),
    }
    for g in src.groups:
        for k in g.keys:
            if k.name in makers:
                k.make = makers[k.name]
        missing = getattr(model, 'missing', {}).get((mi, gi))
        if missing is not None:  # the module has no data at all for that train
            g.counts = (lambda t, m=missing, f=g.counts: 0 if t == m else f(t))
    return src


def build(outdir, modules=4, cells=64, trains=120, pixels=(512, 128), trains_per_file=None,
          seed=1, first_train=100000, missing_train=True, format_version='1.3'):
    """Writes the three runs, truth.h5 and dark_runs.json under outdir; returns the manifest."""
    model = DarkModel(modules, cells, pixels, seed)
    tpf = trains_per_file or max(1, -(-trains // 3))
    model.missing = {}
    if missing_train and len(model.modules) > 1 and trains > 2:
        # medium-gain run: the second module lost one train (INDEX count 0)
        model.missing[(1, 1)] = first_train + 10000 * 1 + trains // 2
    runs = []
    for gi, g in enumerate(GAINS):
        run_dir = osp.join(outdir, 'raw', f'r{RUN_NUMBERS[gi]:04d}')
        w = euxfel_mock.RunWriter(run_dir, format_version=format_version,
                                  run_number=RUN_NUMBERS[gi], keep_data=False,
                                  block_bytes=64 << 20)
        t0 = first_train + 10000 * gi
        for mi, m in enumerate(model.modules):
            src = dark_module_source(model, mi, gi)
            # sequence breaks differ per module: the first file is shorter by m % 3 trains
            breaks = [t0]
            b = t0 + max(1, tpf - m % 3)
            while b < t0 + trains:
                breaks.append(b)
                b += tpf
            breaks.append(t0 + trains)
            for s in range(len(breaks) - 1):
                w.write_file(f'AGIPD{m:02d}', s, [src], list(range(breaks[s], breaks[s + 1])))
        runs.append(run_dir)
    model.save_truth(osp.join(outdir, 'truth.h5'), trains)
    manifest = {
        'runs': dict(zip(GAINS, runs)),
        'run_names': {g: osp.basename(r) for g, r in zip(GAINS, runs)},
        'modules': model.modules, 'cells': cells, 'trains': trains, 'pixels': list(pixels),
        'trains_per_file': tpf, 'seed': seed, 'truth': osp.join(outdir, 'truth.h5'),
        'sources': [source_name(m) for m in model.modules],
        'missing_trains': [{'gain': GAINS[gi], 'module': model.modules[mi], 'train': t}
                           for (mi, gi), t in model.missing.items()],
        'frame_bytes': 2 * 2 * pixels[0] * pixels[1],
    }
    with open(osp.join(outdir, 'dark_runs.json'), 'w') as f:
        json.dump(manifest, f, indent=1)
    return manifest


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('outdir')
    ap.add_argument('--modules', type=int, default=4)
    ap.add_argument('--cells', type=int, default=64)
    ap.add_argument('--trains', type=int, default=120)
    ap.add_argument('--pixels', default='512x128', help='PYxPX, e.g. 32x16 for tests')
    ap.add_argument('--trains-per-file', type=int)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--no-missing-train', action='store_true')
    a = ap.parse_args(argv)
    py, px = (int(v) for v in a.pixels.lower().split('x'))
    m = build(a.outdir, a.modules, a.cells, a.trains, (py, px), a.trains_per_file, a.seed,
              missing_train=not a.no_missing_train)
    print(json.dumps(m['runs'], indent=1))


if __name__ == '__main__':
    sys.exit(main())
