#!/usr/bin/python3
"""Multi-module detector runs for h5direct's detector views, written with euxfel_mock's RunWriter
(EXtra-data's mock layout), and the arrays EXtra-data's detector components would return,
computed here INDEPENDENTLY from the generator's inputs (never by reading the files back).

The expected arrays re-implement, in a few lines of numpy, the rules of
extra_data/components.py (European-XFEL/EXtra-data):
  - detectors and modules by source name (MultimodDetectorBase._find_detector_names,
    _identify_sources: CORR names preferred over DET, module number from the name),
  - mod_data_counts of the main key ('image.data' / 'data.adc') per module and train; one common
    non-zero count per train (else ValueError), _select_trains(min_modules=1): the trains where
    any module has data; train_ids_perframe = repeat(train_ids, frame_counts),
  - MultimodKeyData.ndarray() / XtdfImageMultimodKeyData.ndarray() with default arguments:
    _out_array (NaN for floats, else 0), modules sorted by number, no module gaps, a module's
    rows for train T go to T's rows (_split_align_chunk); XTDF image.* keys drop a leading
    length-1 entry axis (_extraneous_dim); other keys give one row per train,
  - pulse_id_coordinates / cell_id_coordinates (_collect_inner_ids),
  - the frames-first layout of write_cxi.py (VirtualCXIWriterBase): (frames, n_modules, ...)
    with every module slot (XTDF modules from 0, JUNGFRAU from 1), JUNGFRAU cells folded into
    frames, fill data NaN/0, mask 0xffffffff, others 0.

Usage: detector_mock.py OUTDIR [--scenario raw|corr|bench]
  OUTDIR/raw|proc/r0338/*.h5 and OUTDIR/expected/{detectors.json, *.npy}
"""
import argparse
import json
import os
import os.path as osp
import sys

import numpy as np

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import euxfel_mock  # noqa: E402
from euxfel_mock import Group, Key, RunWriter, Source, detector_module  # noqa: E402

# Keys whose content is the same in every module (IDs), so pulse / cell IDs are consistent.
_ID_SOURCES = set()
_orig_make_rows = euxfel_mock.make_rows


def _make_rows(source, key, dtype, entry_shape, tids, js):
    if source in _ID_SOURCES and key in ('image.pulseId', 'image.cellId', 'image.trainId',
                                         'data.memoryCell'):
        tids = np.asarray(tids, dtype=np.int64)
        js = np.asarray(js, dtype=np.int64)
        if key == 'image.trainId':
            v = tids
        elif key == 'image.pulseId':
            v = js * 4 + tids % 3
        elif key == 'image.cellId':
            v = js + 1
        else:  # JUNGFRAU memoryCell per cell
            n = int(np.prod(entry_shape))
            v = (np.arange(n)[None, :] + 0 * tids[:, None])
        return np.asarray(v).astype(dtype).reshape((len(tids),) + tuple(entry_shape))
    return _orig_make_rows(source, key, dtype, entry_shape, tids, js)


euxfel_mock.make_rows = _make_rows


def jungfrau_module(device, cells, counts, dims=(8, 16), corrected=False):
    """extra_data/tests/mockdata/jungfrau.py: JUNGFRAUModule, daqOutput/data."""
    keys = [Key('data.adc', 'f4' if corrected else 'u2', (cells,) + dims, chunks='frame'),
            Key('data.frameNumber', 'u8', (cells,)),
            Key('data.gain', 'u1', (cells,) + dims, chunks='frame', compression='gzip1'),
            Key('data.memoryCell', 'u1', (cells,)),
            Key('data.timestamp', 'f8', (cells,))]
    if corrected:
        keys.append(Key('data.mask', 'u4', (cells,) + dims, chunks='frame', compression='gzip1'))
    return Source(f'{device}:daqOutput', 'INSTRUMENT', [Group('data', keys, counts, pad_to=4)])


class Det:
    def __init__(self, name, cls, xtdf, n_modules, start, sources, main_key, mask_key):
        self.name, self.cls, self.xtdf = name, cls, xtdf
        self.n_modules, self.start = n_modules, start
        self.sources = sources  # {modno: Source}
        self.main_key, self.mask_key = main_key, mask_key


def write_module(w, agg, src, breaks):
    """One module's sequence files: trains [breaks[i], breaks[i+1]) in file i."""
    _ID_SOURCES.add(src.name)
    for s in range(len(breaks) - 1):
        w.write_file(agg, s, [src], list(range(breaks[s], breaks[s + 1])))


# --- expected arrays, independently -----------------------------------------------------

def module_rows(w, source, key):
    """run[source, key].ndarray() and its train IDs, from the generator's segments."""
    return euxfel_mock.expected_for(w, w.segments[(source, key)])


def expected_detector(w, det):
    mods = sorted(det.sources)
    M = len(mods)
    main_group = det.main_key.split('.')[0]
    # mod_data_counts, frame_counts, _select_trains
    counts = {}
    for i, m in enumerate(mods):
        _, tids = module_rows(w, det.sources[m].name, det.main_key)
        for t, c in zip(*np.unique(tids, return_counts=True)):
            counts.setdefault(int(t), [0] * M)[i] = int(c)
    train_ids, frame_counts = [], []
    for t in sorted(counts):
        nz = set(counts[t]) - {0}
        assert len(nz) <= 1, f'inconsistent counts {t}: {nz}'
        if nz:
            train_ids.append(t)
            frame_counts.append(nz.pop())
    train_ids = np.array(train_ids, 'u8')
    frame_counts = np.array(frame_counts, np.intp)
    perframe = np.repeat(train_ids, frame_counts)
    offset = dict(zip(train_ids.tolist(), np.concatenate([[0], np.cumsum(frame_counts)[:-1]]).tolist()))
    tindex = {int(t): i for i, t in enumerate(train_ids)}
    cells = 1
    src0 = det.sources[mods[0]]
    keys = {k.name: (k, g) for g in src0.groups for k in g.keys}
    if not det.xtdf:
        cells = keys[det.main_key][0].entry_shape[0]
    out = {'train_ids': train_ids, 'perframe': perframe, 'keys': {}, 'cells': cells}
    for name, (k, g) in sorted(keys.items()):
        per_frame = det.xtdf and name.startswith('image.')
        entry = tuple(k.entry_shape)
        squeeze = per_frame and len(entry) >= 1 and entry[0] == 1
        inner = entry[1:] if squeeze else entry
        rows = len(perframe) if per_frame else len(train_ids)
        dt = np.dtype(k.dtype)
        fill = np.nan if dt.kind == 'f' else 0
        mf = np.full((M, rows) + inner, fill, dtype=dt)
        have = np.zeros((M, rows), bool)
        ok = True
        for i, m in enumerate(mods):
            data, tids = module_rows(w, det.sources[m].name, name)
            data = data.reshape((len(tids),) + inner)
            for t in np.unique(tids):
                sel = np.nonzero(tids == t)[0]
                if int(t) not in tindex:
                    continue  # not a detector train
                if per_frame:
                    o = offset[int(t)]
                    mf[i, o:o + len(sel)] = data[sel]
                    have[i, o:o + len(sel)] = True
                else:
                    if len(sel) != 1:
                        ok = False
                    mf[i, tindex[int(t)]] = data[sel[0]]
                    have[i, tindex[int(t)]] = True
        if not ok:
            continue
        e = {'data': mf, 'filled': ~have, 'train_ids': perframe if per_frame else train_ids,
             'per_frame': per_frame}
        # frames first (write_cxi.py)
        ff = None
        if per_frame or (not det.xtdf and g.name == main_group and
                         (cells == 1 or (len(entry) >= 1 and entry[0] == cells))):
            S = det.n_modules
            if cells > 1:
                f_inner = entry[1:]
            elif not per_frame and len(entry) >= 1 and entry[0] == 1:
                f_inner = entry[1:]
            else:
                f_inner = inner
            ffill = np.array(0xffffffff).astype(dt) if name == det.mask_key else \
                (np.nan if dt.kind == 'f' else 0)
            nf = rows * cells
            ff = np.full((nf, S) + f_inner, ffill, dtype=dt)
            ff_have = np.zeros((nf, S), bool)
            for i, m in enumerate(mods):
                slot = m - det.start
                v = mf[i].reshape((nf,) + f_inner)
                h = np.repeat(have[i], cells)
                ff[h, slot] = v[h]
                ff_have[:, slot] = h
            e['ff'] = ff
            e['ff_filled'] = ~ff_have
            e['ff_train_ids'] = np.repeat(e['train_ids'], cells)
        out['keys'][name] = e
    if det.xtdf:
        for field in ('pulseId', 'cellId'):
            v = out['keys'][f'image.{field}']
            ids = np.full((len(perframe), det.n_modules), 9999, np.uint64)
            for i, m in enumerate(mods):
                h = v['filled'][i] == 0
                ids[h, m] = v['data'][i][h]
            mn = ids.min(axis=1)
            ids[ids == 9999] = 0
            assert (mn != 9999).all() and (mn == ids.max(axis=1)).all()
            out[field] = mn
    return out


def save_expected(outdir, run_dir, dets, w):
    exp = osp.join(outdir, 'expected')
    os.makedirs(exp, exist_ok=True)
    manifest = {'run_dir': run_dir, 'detectors': {}}
    n = 0

    def save(a):
        nonlocal n
        n += 1
        np.save(osp.join(exp, f'd{n}.npy'), a)
        return f'd{n}.npy'

    for det in dets:
        e = expected_detector(w, det)
        dm = {'class': det.cls, 'modules': sorted(det.sources), 'n_modules': det.n_modules,
              'module_slots': list(range(det.start, det.start + det.n_modules)),
              'train_ids': save(e['train_ids']), 'perframe': save(e['perframe']),
              'keys': {}}
        for f in ('pulseId', 'cellId'):
            if f in e:
                dm[f] = save(e[f])
        for name, k in e['keys'].items():
            km = {'data': save(k['data']), 'filled': save(k['filled']),
                  'train_ids': save(k['train_ids']), 'per_frame': k['per_frame']}
            if 'ff' in k:
                km.update(ff=save(k['ff']), ff_filled=save(k['ff_filled']),
                          ff_train_ids=save(k['ff_train_ids']))
            dm['keys'][name] = km
        manifest['detectors'][det.name] = dm
    with open(osp.join(exp, 'detectors.json'), 'w') as fh:
        json.dump(manifest, fh, indent=1)
    return manifest


# --- scenarios ----------------------------------------------------------------------------

def frames_rule(t):
    """Frames per train, the same for every module: varies 0..3 (trains with 0 frames in every
    module are not detector trains)."""
    return [2, 0, 3, 1, 2, 2][t % 6]


def build(outdir, scenario='raw', bench_trains=16, bench_frames=16, bench_files=2):
    corr = scenario == 'corr'
    run_dir = osp.join(outdir, 'proc' if corr else 'raw', 'r0338')
    w = RunWriter(run_dir, prefix='CORR' if corr else 'RAW')
    first = 10000
    dets = []
    if scenario == 'bench':
        srcs = {}
        ntr = bench_trains
        for m in range(16):
            src = detector_module(f'SPB_DET_AGIPD1M-1/DET/{m}CH0', lambda t: bench_frames,
                                  image_dims=(2, 512, 128))
            step = -(-ntr // bench_files)
            write_module(w, f'AGIPD{m:02d}', src,
                         [first + min(i * step, ntr) for i in range(bench_files)] + [first + ntr])
            srcs[m] = src
        dets.append(Det('SPB_DET_AGIPD1M-1', 'AGIPD1M', True, 16, 0, srcs, 'image.data',
                        'image.mask'))
        save_expected(outdir, run_dir, [], w)
        return run_dir
    ntrains = 20
    end = first + ntrains

    # AGIPD-1M: modules 0, 1, 2, 3, 5, 7 of 16 (4, 6, 8-15 missing); module 2 starts 3 trains
    # late and misses trains 10009-10010 (count 0 while the others have frames); module 5 ends
    # 2 trains early; sequence breaks differ per module.
    agipd = {}
    for m in (0, 1, 2, 3, 5, 7):
        if corr:
            dev = f'SPB_DET_AGIPD1M-1/CORR/{m}CH0'
            legacy = f'SPB_DET_AGIPD1M-1/DET/{m}CH0'
        else:
            dev, legacy = f'SPB_DET_AGIPD1M-1/DET/{m}CH0', None
        gap = {10009, 10010} if m == 2 else set()
        frames = (lambda gap: lambda t: 0 if t in gap else frames_rule(t))(gap)
        src = detector_module(dev, frames, raw=not corr, channel='output' if corr else 'xtdf',
                              legacy=legacy, image_dims=(2, 16, 8))
        start = first + (3 if m == 2 else 0)
        stop = end - (2 if m == 5 else 0)
        brk = first + 5 + 2 * m
        write_module(w, f'AGIPD{m:02d}', src, [start, max(start + 1, brk), stop])
        agipd[m] = src
    dets.append(Det('SPB_DET_AGIPD1M-1', 'AGIPD1M', True, 16, 0, agipd, 'image.data',
                    'image.mask'))

    if not corr:
        # LPD-1M raw: (1, 16, 16) frames (a length-1 axis EXtra-data drops), modules 0, 3, 15.
        lpd = {}
        for m in (0, 3, 15):
            src = detector_module(f'FXE_DET_LPD1M-1/DET/{m}CH0', frames_rule,
                                  image_dims=(1, 16, 16))
            write_module(w, f'LPD{m:02d}', src, [first + 1, first + 9 + m % 4, end])
            lpd[m] = src
        dets.append(Det('FXE_DET_LPD1M-1', 'LPD1M', True, 16, 0, lpd, 'image.data',
                        'image.mask'))
        # JUNGFRAU 4M, raw, 2 memory cells: modules 1, 2, 4 (3 missing); module 4 misses
        # trains 10004-10006.
        jf = {}
        for m in (1, 2, 4):
            gap = {10004, 10005, 10006} if m == 4 else set()
            src = jungfrau_module(f'SPB_IRDA_JF4M/DET/JNGFR{m:02d}',
                                  2, (lambda gap: lambda t: 0 if t in gap else 1)(gap))
            write_module(w, f'JNGFR{m:02d}', src, [first, first + 7 + m, end])
            jf[m] = src
        dets.append(Det('SPB_IRDA_JF4M', 'JUNGFRAU', False, 4, 1, jf, 'data.adc', 'data.mask'))
    else:
        # DSSC-1M corrected (CORR names): (128, 512)-like frames, modules 1 and 4.
        dssc = {}
        for m in (1, 4):
            src = detector_module(f'SCS_DET_DSSC1M-1/CORR/{m}CH0',
                                  (lambda m: lambda t: 0 if (m == 4 and t == 10012) else frames_rule(t))(m),
                                  raw=False, channel='output', image_dims=(1, 8, 16))
            write_module(w, f'DSSC{m:02d}', src, [first, first + 11, end])
            dssc[m] = src
        dets.append(Det('SCS_DET_DSSC1M-1', 'DSSC1M', True, 16, 0, dssc, 'image.data',
                        'image.mask'))
        # JUNGFRAU 1M corrected-like: float adc and a mask, 1 memory cell; modules 1, 2.
        jf = {}
        for m in (1, 2):
            src = jungfrau_module(f'FXE_XAD_JF1M/DET/JNGFR{m:02d}', 1,
                                  (lambda m: lambda t: 0 if (m == 2 and t < first + 2) else 1)(m),
                                  corrected=True)
            write_module(w, f'JNGFR{m:02d}', src, [first, first + 13, end])
            jf[m] = src
        dets.append(Det('FXE_XAD_JF1M', 'JUNGFRAU', False, 2, 1, jf, 'data.adc', 'data.mask'))
    # Slow data besides the detectors.
    slow = [euxfel_mock.xgm_control('SA1_XTD2_XGM/DOOCS/MAIN')]
    w.write_file('DA01', 0, slow, list(range(first, end)))
    save_expected(outdir, run_dir, dets, w)
    return run_dir


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('outdir')
    ap.add_argument('--scenario', default='raw', choices=['raw', 'corr', 'bench'])
    ap.add_argument('--bench-trains', type=int, default=16)
    ap.add_argument('--bench-frames', type=int, default=16)
    ap.add_argument('--bench-files', type=int, default=2)
    a = ap.parse_args(argv)
    print(build(a.outdir, a.scenario, a.bench_trains, a.bench_frames, a.bench_files))


if __name__ == '__main__':
    sys.exit(main())
