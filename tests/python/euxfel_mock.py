#!/usr/bin/python3
"""Generator of European XFEL runs (EXDF) for h5direct's tests, modelled on EXtra-data's mock
writers (extra_data/tests/mockdata/base.py, detectors.py, xgm.py, mkfile.py) and its virtual
overview writer (extra_data/voview.py, writer.py): same dataset names, shapes, dtypes, chunking,
INDEX layout and METADATA for file formats 0.5 / 1.0 / 1.2 / 1.3, datasets padded beyond the
index, sequence files breaking at different trains per aggregator, corrected data with CORR
sources and legacy DET soft links, a virtual overview file built with h5py's VDS API, and
duplicated trains.

Besides the run, it writes what EXtra-data would return, computed from the generator's own
inputs (never by reading the files back): for every (source, key) run[source, key].ndarray()
and .train_id_coordinates() as .npy files, listed in expected.json.

Usage: euxfel_mock.py OUTDIR [--scenario NAME] [--format 1.3] [--overview] ...
  OUTDIR/<run dir name>/*.h5 and OUTDIR/expected/{expected.json, *.npy}
"""
import argparse
import json
import os
import os.path as osp
import sys
import zlib

import h5py
import numpy as np

vlen_bytes = h5py.special_dtype(vlen=bytes)
PAD_VALUE = -7  # rows beyond the index hold this (cast to the dtype): it must never show up


def key_seed(source, key):
    return zlib.crc32(f"{source}|{key}".encode()) % 997


def make_rows(source, key, dtype, entry_shape, tids, js):
    """Deterministic content: row r of train tids[r], frame js[r] of that train."""
    dtype = np.dtype(dtype)
    n = len(tids)
    esize = int(np.prod(entry_shape)) if entry_shape else 1
    base = (np.asarray(tids, dtype=np.int64) % 100000) * 31 + np.asarray(js, dtype=np.int64) * 7 \
        + key_seed(source, key)
    vals = base[:, None] + np.arange(esize, dtype=np.int64)[None, :]
    if dtype.kind == 'f':
        arr = (vals % 1000003).astype(dtype) / dtype.type(8)
    elif dtype.kind in 'iu':
        arr = vals.astype(dtype)  # wraps like C
    elif dtype.kind == 'b':
        arr = (vals % 2).astype(dtype)
    else:
        raise ValueError(dtype)
    return arr.reshape((n,) + tuple(entry_shape))


def pad_rows(dtype, entry_shape, n):
    return np.full((n,) + tuple(entry_shape), PAD_VALUE).astype(dtype)


class Key:
    def __init__(self, name, dtype, entry_shape=(), chunks=None, compression=None, attrs=None,
                 string=False, make=None):
        self.name = name              # "image.data"
        self.dtype = dtype
        self.entry_shape = tuple(entry_shape)
        self.chunks = chunks          # None: h5py default; 'frame': one row per chunk; a tuple
        self.compression = compression
        self.attrs = attrs or {}
        self.string = string          # variable-length string per row: not an array
        # make(row_tids, row_js) -> rows: content instead of make_rows(); called once per block
        # of whole trains (RunWriter.block_bytes), so large datasets are written in bounded memory
        self.make = make

    def compression_kw(self):
        """h5py create_dataset arguments for `compression`: 'gzip1' (shuffle + deflate level 1),
        or a dict of them (e.g. hdf5plugin's filters); None: uncompressed."""
        if self.compression == 'gzip1':
            return dict(compression='gzip', compression_opts=1, shuffle=True)
        return dict(self.compression or {})


class Group:
    """An index group: keys sharing one INDEX/<source>/<group>/{first,count}."""
    def __init__(self, name, keys, counts, pad_to=32, padded=True):
        self.name = name              # '' for CONTROL
        self.keys = keys
        self.counts = counts          # function train_id -> rows for that train
        self.pad_to = pad_to
        self.padded = padded          # False: dataset exactly as long as the data


class Source:
    def __init__(self, name, section, groups, run_values=None, legacy_name=None,
                 old_index=False):
        self.name = name
        self.section = section        # 'CONTROL' | 'INSTRUMENT'
        self.groups = groups
        self.run_values = run_values or {}  # CONTROL: {prop: (dtype, value)}
        self.legacy_name = legacy_name      # corrected data: old DET name as a soft link
        self.old_index = old_index          # first/last/status instead of first/count

    def datasource_ids(self):
        if self.section == 'CONTROL':
            yield 'CONTROL/' + self.name
        else:
            for g in self.groups:
                yield f'INSTRUMENT/{self.name}/{g.name}'
            if self.legacy_name:
                for g in self.groups:
                    yield f'INSTRUMENT/{self.legacy_name}/{g.name}'


# --- devices, after EXtra-data's mocks -----------------------------------------------------

XGM_CONTROL = [('beamPosition/ixPos', 'f4'), ('beamPosition/iyPos', 'f4'),
               ('pulseEnergy/photonFlux', 'f4'), ('pulseEnergy/conversion', 'f8'),
               ('current/bottom/rangeCode', 'i4'), ('pollingInterval', 'i4')]


def xgm_control(name, counts=lambda t: 1, string_key=True):
    keys = []
    for prop, dt in XGM_CONTROL:
        attrs = {}
        keys.append(Key(prop.replace('/', '.') + '.value', dt, attrs=attrs))
        keys.append(Key(prop.replace('/', '.') + '.timestamp', 'u8'))
    if string_key:
        keys.append(Key('state.value', None, string=True))
        keys.append(Key('state.timestamp', 'u8'))
    run_values = {prop: (dt, 1.5 if dt[0] == 'f' else 3) for prop, dt in XGM_CONTROL}
    run_values['classId'] = (None, 'DoocsXGM')
    return Source(name, 'CONTROL', [Group('', keys, counts, pad_to=32)], run_values=run_values)


def xgm_instrument(name, counts=lambda t: 1):
    unit_attrs = {'metricPrefixName': 'micro', 'metricPrefixSymbol': b'u',
                  'unitName': b'joule', 'unitSymbol': b'J'}
    keys = [Key('data.intensityTD', 'f4', (1000,), attrs=unit_attrs),
            Key('data.intensitySigma.x_data', 'f4', (1000,)),
            Key('data.xTD', 'f4', (1000,)),
            Key('data.trainId', 'u8')]
    return Source(name + ':output', 'INSTRUMENT', [Group('data', keys, counts, pad_to=32)])


def detector_module(device, frames, raw=True, channel='xtdf', legacy=None,
                    image_dims=(2, 512, 128)):
    """DetectorModule (AGIPD): image, detector, header, trailer index groups."""
    dims = image_dims if raw else image_dims[1:]
    one = (1,) if raw else ()
    img = [Key('image.trainId', 'u8', one), Key('image.pulseId', 'u8', one),
           Key('image.cellId', 'u2', one)]
    if raw:
        img += [Key('image.data', 'u2', dims, chunks='frame'),
                Key('image.length', 'u4', (1,)), Key('image.status', 'u2', (1,))]
    else:
        img += [Key('image.data', 'f4', dims, chunks='frame'),
                Key('image.mask', 'u4', dims, chunks='frame', compression='gzip1'),
                Key('image.gain', 'u1', dims, chunks='frame', compression='gzip1'),
                Key('image.length', 'u4', (1,)), Key('image.status', 'u2', (1,))]
    groups = [Group('image', img, frames, pad_to=4, padded=raw)]
    groups.append(Group('detector', [Key('detector.data', 'u1', (5408,)),
                                     Key('detector.trainId', 'u8')], lambda t: 1))
    groups.append(Group('header', [Key('header.dataId', 'u8'), Key('header.linkId', 'u8'),
                                   Key('header.magicNumberBegin', 'i1', (8,)),
                                   Key('header.pulseCount', 'u8'),
                                   Key('header.trainId', 'u8')], lambda t: 1))
    groups.append(Group('trailer', [Key('trailer.checksum', 'i1', (16,)),
                                    Key('trailer.status', 'u8'),
                                    Key('trailer.trainId', 'u8')], lambda t: 1))
    return Source(f'{device}:{channel}', 'INSTRUMENT', groups,
                  legacy_name=f'{legacy}:xtdf' if legacy else None)


# --- writing ----------------------------------------------------------------------------

class RunWriter:
    def __init__(self, run_dir, format_version='1.3', chunksize=32, run_number=338,
                 prefix='RAW', proposal=700000, keep_data=True, block_bytes=256 << 20):
        self.run_dir = run_dir
        self.keep_data = keep_data    # False: segments hold data=None (large runs; no expected)
        self.block_bytes = block_bytes  # Key.make content is written in blocks of about this
        self.format_version = format_version
        self.chunksize = chunksize
        self.run_number = run_number
        self.prefix = prefix
        self.proposal = proposal
        # (source, key) -> list of (file_path, file_first_train, first_row, data, tids)
        self.segments = {}
        self.files = []  # paths written, in order
        self.file_trains = {}  # (source, file path) -> train IDs written there
        self.train_ids = set()
        self.first_file_metadata = None
        os.makedirs(run_dir, exist_ok=True)

    def write_file(self, aggregator, seq, sources, train_ids, flags=None, suspect=()):
        """One sequence file holding `train_ids` (in that order) for every source."""
        name = f'{self.prefix}-R{self.run_number:04d}-{aggregator}-S{seq:05d}.h5'
        path = osp.join(self.run_dir, name)
        fv = self.format_version
        N = len(train_ids)
        cs = self.chunksize
        Npad = N + (-N) % cs if N % cs else N
        if Npad == N:
            Npad += cs  # always some padding beyond the index
        with h5py.File(path, 'w') as f:
            f.create_group('RUN')
            # INDEX base (write_base_index)
            if fv != '0.5':
                flag = np.zeros(Npad, 'i4')
                flag[:N] = 1
                for i, t in enumerate(train_ids):
                    if t in suspect:
                        flag[i] = 0
                f.create_dataset('INDEX/flag', data=flag, maxshape=(None,), chunks=(cs,))
                ts = np.zeros(Npad, 'u8')
                ts[:N] = 1_600_000_000 * 10**9 + np.arange(N, dtype='u8') * 10**8
                f.create_dataset('INDEX/timestamp', data=ts, maxshape=(None,), chunks=(cs,))
            if fv not in ('0.5', '1.0'):
                orig = np.zeros(Npad, 'i4')
                orig[:N] = -1
                f.create_dataset('INDEX/origin', data=orig, maxshape=(None,), chunks=(cs,))
            tid = np.zeros(Npad, 'u8')
            tid[:N] = train_ids
            f.create_dataset('INDEX/trainId', data=tid, maxshape=(None,), chunks=(cs,))

            for src in sources:
                self._write_source(f, path, src, train_ids, Npad)
            data_sources = [d for s in sources for d in s.datasource_ids()]
            self._write_metadata(f, data_sources, name, seq)
        self.files.append(path)
        for s in sources:
            self.file_trains[(s.name, path)] = [int(t) for t in train_ids]
        self.train_ids.update(int(t) for t in train_ids)
        return path

    def _write_source(self, f, path, src, train_ids, Npad):
        N = len(train_ids)
        for g in src.groups:
            counts = np.array([g.counts(t) for t in train_ids], dtype='u8')
            firsts = np.zeros(N, 'u8')
            if N:
                firsts[1:] = np.cumsum(counts)[:-1]
            nrows = int(counts.sum())
            ipath = f'INDEX/{src.name}' + (f'/{g.name}' if g.name else '')
            # Index arrays padded like INDEX/trainId, with junk the reader must cut off.
            fpad = np.full(Npad, 999999, 'u8')
            fpad[:N] = firsts
            if src.old_index:
                last = np.full(Npad, 5, 'u8')
                status = np.zeros(Npad, 'u8')
                for i in range(N):
                    last[i] = firsts[i] + counts[i] - 1 if counts[i] else max(int(firsts[i]), 1) - 1
                    status[i] = 1 if counts[i] else 0
                    if counts[i] == 0:
                        # (last - first + 1) * status must be 0 whatever last is
                        last[i] = firsts[i]
                f.create_dataset(ipath + '/first', data=fpad, maxshape=(None,))
                f.create_dataset(ipath + '/last', data=last, maxshape=(None,))
                f.create_dataset(ipath + '/status', data=status, maxshape=(None,))
            else:
                cpad = np.full(Npad, 7, 'u8')
                cpad[:N] = counts
                f.create_dataset(ipath + '/first', data=fpad, maxshape=(None,))
                f.create_dataset(ipath + '/count', data=cpad, maxshape=(None,))

            row_tids = np.repeat(np.asarray(train_ids, 'u8'), counts.astype(np.intp))
            row_js = np.concatenate([np.arange(c) for c in counts]) if N else np.zeros(0)
            row_js = row_js.astype(np.int64)
            if g.padded:
                alloc = nrows + (-nrows) % g.pad_to
                if alloc == nrows:
                    alloc += g.pad_to
            else:
                alloc = nrows
            base = f'{src.section}/{src.name}'
            for k in g.keys:
                dpath = f'{base}/{k.name.replace(".", "/")}'
                if k.string:
                    vals = [f'state {t} {j}'.encode() for t, j in zip(row_tids, row_js)]
                    vals += [b'PADDING'] * (alloc - nrows)
                    f.create_dataset(dpath, data=np.array(vals, dtype=object), dtype=vlen_bytes,
                                     maxshape=(None,))
                    data = np.array([v.decode() for v in vals[:nrows]], dtype=object)
                elif k.make is not None:
                    data = self._write_made(f, dpath, k, g, counts, row_tids, row_js, alloc)
                    if src.section == 'CONTROL' and k.name.endswith('.value'):
                        f[dpath].parent.attrs['description'] = f'{k.name[:-6]} of {src.name}'
                else:
                    data = make_rows(src.name, k.name, k.dtype, k.entry_shape, row_tids, row_js)
                    full = np.concatenate([data, pad_rows(k.dtype, k.entry_shape, alloc - nrows)])
                    kw = {}
                    if isinstance(k.chunks, tuple):
                        kw['chunks'] = k.chunks
                    elif k.chunks == 'frame':
                        kw['chunks'] = (1,) + k.entry_shape
                    elif alloc:
                        kw['chunks'] = (min(alloc, self.chunksize),) + k.entry_shape
                    kw.update(k.compression_kw())
                    maxshape = (None,) + k.entry_shape if g.padded else full.shape
                    if alloc == 0:
                        kw.pop('chunks', None)
                        maxshape = (None,) + k.entry_shape
                        kw['chunks'] = (1,) + k.entry_shape
                    ds = f.create_dataset(dpath, data=full, maxshape=maxshape, **kw)
                    for an, av in k.attrs.items():
                        ds.attrs[an] = av
                    if src.section == 'CONTROL' and k.name.endswith('.value'):
                        # Karabo puts property attributes on the parent group
                        f[dpath].parent.attrs['description'] = f'{k.name[:-6]} of {src.name}'
                self.segments.setdefault((src.name, k.name), []).append(dict(
                    file=path, train0=int(train_ids[0]) if N else None, first=0, rows=nrows,
                    data=data if self.keep_data else None, tids=row_tids, string=k.string, dtype=k.dtype,
                    entry_shape=k.entry_shape, group=g.name))
        if src.section == 'CONTROL':
            for prop, (dt, v) in src.run_values.items():
                p = f'RUN/{src.name}/{prop}'
                if isinstance(v, str):
                    f.create_dataset(p + '/value', data=[v.encode()], dtype=vlen_bytes,
                                     maxshape=(None,))
                else:
                    f.create_dataset(p + '/value', data=np.array([v], dtype=dt), maxshape=(None,))
                f.create_dataset(p + '/timestamp', data=np.array([1234], 'u8'), maxshape=(None,))
        if src.legacy_name:
            f[f'INDEX/{src.legacy_name}'] = h5py.SoftLink(f'/INDEX/{src.name}')
            f[f'INSTRUMENT/{src.legacy_name}'] = h5py.SoftLink(f'/INSTRUMENT/{src.name}')

    def _write_made(self, f, dpath, k, g, counts, row_tids, row_js, alloc):
        """A key whose rows come from k.make: the dataset is created empty (same chunking and
        padding rules as the other keys) and filled in blocks of whole trains, then padded."""
        nrows = len(row_tids)
        kw = {}
        if isinstance(k.chunks, tuple) and alloc:
            kw['chunks'] = k.chunks
        elif k.chunks == 'frame' or alloc == 0:
            kw['chunks'] = (1,) + k.entry_shape
        else:
            kw['chunks'] = (min(alloc, self.chunksize),) + k.entry_shape
        kw.update(k.compression_kw())
        maxshape = (None,) + k.entry_shape if (g.padded or alloc == 0) else (alloc,) + k.entry_shape
        ds = f.create_dataset(dpath, shape=(alloc,) + k.entry_shape, dtype=k.dtype,
                              maxshape=maxshape, **kw)
        row_bytes = max(1, np.dtype(k.dtype).itemsize * int(np.prod(k.entry_shape)))
        per_block = max(1, self.block_bytes // row_bytes)
        kept = []
        bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        i = 0
        while i < len(counts):  # whole trains per block, at least one
            j = i + 1
            while j < len(counts) and bounds[j + 1] - bounds[i] <= per_block:
                j += 1
            r0, r1 = int(bounds[i]), int(bounds[j])
            if r1 > r0:
                rows = np.asarray(k.make(row_tids[r0:r1], row_js[r0:r1]), dtype=k.dtype)
                rows = rows.reshape((r1 - r0,) + k.entry_shape)
                ds[r0:r1] = rows
                if self.keep_data:
                    kept.append(rows)
            i = j
        if alloc > nrows:
            ds[nrows:alloc] = pad_rows(k.dtype, k.entry_shape, alloc - nrows)
        for an, av in k.attrs.items():
            ds.attrs[an] = av
        if not self.keep_data:
            return None
        return np.concatenate(kept) if kept else np.zeros((0,) + k.entry_shape, k.dtype)

    def _write_metadata(self, f, data_sources, name, seq):
        fv = self.format_version
        cs = 16
        N = len(data_sources)
        N += (-N) % cs
        if N == len(data_sources):
            N += cs  # some empty entries to skip
        root = [d.split('/', 1)[0] for d in data_sources]
        devices = [d.split('/', 1)[1] for d in data_sources]
        grp = f.create_group('METADATA') if fv == '0.5' else f.create_group('METADATA/dataSources')
        for dsname, vals in (('dataSourceId', data_sources), ('root', root), ('deviceId', devices)):
            ds = grp.create_dataset(dsname, (N,), dtype=vlen_bytes, maxshape=(None,))
            ds[:len(vals)] = [v.encode() for v in vals]
            ds[len(vals):] = [b''] * (N - len(vals))
        if fv != '0.5':
            md = {'dataFormatVersion': fv, 'creationDate': '20240101T120000Z',
                  'daqLibrary': '1.9.0', 'karaboFramework': '2.7.0', 'runType': 'Test DAQ',
                  'sample': 'No Sample', 'updateDate': '20240101T120500Z'}
            for k, v in md.items():
                f[f'METADATA/{k}'] = [v.encode('ascii')]
            f.create_dataset('METADATA/proposalNumber', dtype=np.uint32, data=[self.proposal])
            f.create_dataset('METADATA/runNumber', dtype=np.uint32, data=[self.run_number])
            f.create_dataset('METADATA/sequenceNumber', dtype=np.uint32, data=[seq])


def expected_for(writer, key_segments):
    """EXtra-data's order: each file's block sorted by its first train ID (stable: ties in file
    name order); empty blocks contribute nothing."""
    segs = [s for s in key_segments if s['train0'] is not None]
    segs.sort(key=lambda s: (s['train0'], osp.basename(s['file'])))
    if segs and segs[0]['string']:
        data = np.concatenate([s['data'] for s in segs]) if segs else np.zeros(0, object)
    else:
        e = segs[0] if segs else key_segments[0]
        parts = [s['data'] for s in segs]
        data = np.concatenate(parts) if parts else np.zeros((0,) + e['entry_shape'], e['dtype'])
    tids = np.concatenate([s['tids'] for s in segs]).astype('u8') if segs else np.zeros(0, 'u8')
    return data, tids


def write_overview(writer, run_tids, sources, path=None):
    """VirtualOverviewFileWriter, built from the generator's knowledge of the blocks."""
    path = path or osp.join(writer.run_dir, 'overview.h5')
    copy_keys = {'image.pulseId', 'image.cellId'}
    run_tids = np.asarray(run_tids, 'u8')
    with h5py.File(path, 'w') as f:
        names = sorted(osp.basename(p) for p in writer.files)
        f.create_group('.source_files')
        f['.source_files'].create_dataset('names', data=[n.encode('ascii') for n in names],
                                          dtype=vlen_bytes)
        f['.source_files'].create_dataset(
            'sizes', data=[os.stat(osp.join(writer.run_dir, n)).st_size for n in names], dtype='u8')
        f.attrs['virtual_overview_version'] = 1
        f.attrs['writer'] = 'h5direct euxfel_mock'
        f.create_dataset('INDEX/trainId', data=run_tids, dtype='u8')
        data_sources = set()
        indexes = {}
        all_names = []
        for src in sources:
            all_names.append((src.name, src))
            if src.legacy_name:
                all_names.append((src.legacy_name, src))  # EXtra-data lists legacy names too
        for sname, src in all_names:
            grp = f.require_group(f'{src.section}/{sname}')
            src_files = sorted({s['file'] for g in src.groups for k in g.keys
                                for s in writer.segments[(src.name, k.name)]})
            grp.attrs['source_files'] = src_files
            for g in src.groups:
                for k in g.keys:
                    segs = writer.segments[(src.name, k.name)]
                    data, tids = expected_for(writer, segs)
                    dpath = f'{src.section}/{sname}/{k.name.replace(".", "/")}'
                    if k.name in copy_keys or k.string:
                        if k.string:
                            f.create_dataset(dpath, data=np.array([s.encode() for s in data],
                                                                  dtype=object), dtype=vlen_bytes)
                        else:
                            f.create_dataset(dpath, data=data, compression='gzip')
                    elif len(data) == 0:
                        parent, name = dpath.rsplit('/', 1)
                        pg = f.require_group(parent)
                        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
                        dcpl.set_layout(h5py.h5d.VIRTUAL)
                        h5py.h5d.create(pg.id, name=name.encode(),
                                        tid=h5py.h5t.py_create(np.dtype(k.dtype), logical=1),
                                        space=h5py.h5s.create_simple(data.shape), dcpl=dcpl)
                    else:
                        layout = h5py.VirtualLayout(shape=data.shape, dtype=k.dtype)
                        cursor = 0
                        ordered = sorted([s for s in segs if s['train0'] is not None],
                                         key=lambda s: (s['train0'], osp.basename(s['file'])))
                        for s in ordered:
                            n = s['rows']
                            if n == 0:
                                continue
                            with h5py.File(s['file'], 'r') as sf:
                                srcds = sf[f'{src.section}/{src.name}/{k.name.replace(".", "/")}']
                                vs = h5py.VirtualSource(srcds)
                            layout[cursor:cursor + n] = vs[s['first']:s['first'] + n]
                            cursor += n
                        f.create_virtual_dataset(dpath, layout)
                    ipath = sname + ('/' + g.name if g.name else '')
                    if ipath not in indexes:
                        counts = np.array([np.count_nonzero(tids == t) for t in run_tids], 'u8')
                        firsts = np.zeros_like(counts)
                        if len(counts):
                            firsts[1:] = np.cumsum(counts)[:-1]
                        indexes[ipath] = (firsts, counts)
                    if src.section == 'INSTRUMENT':
                        data_sources.add(f'INSTRUMENT/{sname}/{g.name}')
                    else:
                        data_sources.add(f'CONTROL/{sname}')
            if src.section == 'CONTROL':
                first_file = sorted(src_files)[0]
                f[f'RUN/{sname}'] = h5py.ExternalLink(first_file, f'RUN/{sname}')
        for ipath, (first, count) in indexes.items():
            g = f.create_group(f'INDEX/{ipath}')
            g.create_dataset('first', data=first, dtype='u8')
            g.create_dataset('count', data=count, dtype='u8')
        ds_list = sorted(data_sources)
        fv = writer.format_version
        if fv != '0.5':
            mg = f.create_group('METADATA/dataSources')
            f.create_dataset('INDEX/flag', data=np.ones(len(run_tids), 'i4'))
            f['METADATA/dataFormatVersion'] = [b'1.0']
            f.create_dataset('METADATA/proposalNumber', dtype=np.uint32, data=[writer.proposal])
            f.create_dataset('METADATA/runNumber', dtype=np.uint32, data=[writer.run_number])
        else:
            mg = f.create_group('METADATA')
        mg.create_dataset('dataSourceId', data=[d.encode() for d in ds_list], dtype=vlen_bytes)
        mg.create_dataset('root', data=[d.split('/', 1)[0].encode() for d in ds_list], dtype=vlen_bytes)
        mg.create_dataset('deviceId', data=[d.split('/', 1)[1].encode() for d in ds_list],
                          dtype=vlen_bytes)
    return path


# --- scenarios ----------------------------------------------------------------------------

def build(outdir, scenario='basic', format_version='1.3', overview=False, modules=4,
          image_dims=(2, 512, 128), seq_files=None, trains_per_file=None):
    """Writes the run and the expected arrays; returns the run directory."""
    raw = scenario != 'corr'
    prefix = 'RAW' if raw else 'CORR'
    run_dir = osp.join(outdir, 'raw' if raw else 'proc', 'r0338')
    w = RunWriter(run_dir, format_version=format_version, prefix=prefix)
    first = 10000
    ntrains = 24
    legacy = {}
    sources = []
    suspect = {first + 5} if format_version != '0.5' else set()

    if scenario == 'bench':
        nseq = seq_files or 20
        tpf = trains_per_file or 2
        ntrains = nseq * tpf
        for m in range(modules):
            src = detector_module(f'SPB_DET_AGIPD1M-1/DET/{m}CH0', lambda t: 1,
                                  image_dims=image_dims)
            sources.append(src)
            for s in range(nseq):
                w.write_file(f'AGIPD{m:02d}', s, [src],
                             list(range(first + s * tpf, first + (s + 1) * tpf)))
        slow = [xgm_control('SA1_XTD2_XGM/DOOCS/MAIN'), xgm_instrument('SA1_XTD2_XGM/DOOCS/MAIN')]
        sources += slow
        for s in range(nseq):
            w.write_file('DA01', s, slow, list(range(first + s * tpf, first + (s + 1) * tpf)))
    else:
        # Slow data: 2 sequence files breaking at train 10011; CONTROL source with a train
        # without data (count 0) and a string key; an instrument channel whose count varies.
        ctrl = xgm_control('SA1_XTD2_XGM/DOOCS/MAIN', counts=lambda t: 0 if t == first + 3 else 1)
        if scenario == 'oldindex':
            ctrl.old_index = True
        inst = xgm_instrument('SA1_XTD2_XGM/DOOCS/MAIN', counts=lambda t: (t % 3))
        ctrl2 = xgm_control('SPB_XTD9_XGM/DOOCS/MAIN', string_key=False)
        slow = [ctrl, inst, ctrl2]
        sources += slow
        if scenario == 'dup':
            # Train first+11 written in both sequence files: a data error.
            w.write_file('DA01', 0, slow, list(range(first, first + 12)), suspect=suspect)
            w.write_file('DA01', 1, slow, list(range(first + 11, first + ntrains)))
        else:
            w.write_file('DA01', 0, slow, list(range(first, first + 11)), suspect=suspect)
            w.write_file('DA01', 1, slow, list(range(first + 11, first + ntrains)))
        # Detector modules: frames per train vary (0..3) from train to train, the same in every
        # module (one pulse pattern per train: EXtra-data's detector classes refuse trains whose
        # modules disagree, "Inconsistent frame counts"); sequence breaks differ per module,
        # module 1 misses the first two trains.
        for m in range(modules):
            dev = f'SPB_DET_AGIPD1M-1/{"DET" if raw else "CORR"}/{m}CH0'
            src = detector_module(dev, lambda t: t % 4, raw=raw,
                                  channel='xtdf' if raw else 'output',
                                  legacy=None if raw else f'SPB_DET_AGIPD1M-1/DET/{m}CH0',
                                  image_dims=image_dims)
            if src.legacy_name:
                legacy[src.legacy_name] = src.name
            sources.append(src)
            start = first + (2 if m == 1 else 0)
            breaks = [start, first + 6 + 2 * m, first + 15 + m, first + ntrains]
            for s in range(3):
                tids = list(range(breaks[s], breaks[s + 1]))
                w.write_file(f'AGIPD{m:02d}', s, [src], tids,
                             suspect=suspect if s == 0 else ())

    # Expected arrays from the generator's inputs.
    exp_dir = osp.join(outdir, 'expected')
    os.makedirs(exp_dir, exist_ok=True)
    run_tids = sorted(w.train_ids)
    np.save(osp.join(exp_dir, 'run_train_ids.npy'), np.array(run_tids, 'u8'))
    manifest = {'run_dir': run_dir, 'train_ids': 'run_train_ids.npy', 'keys': [],
                'legacy': legacy, 'sources': {}, 'format_version': format_version,
                'duplicates': {}, 'run_values': {}}
    i = 0
    for src in sources:
        manifest['sources'][src.name] = src.section
        if src.legacy_name:
            manifest['sources'][src.legacy_name] = src.section
        if src.section == 'CONTROL':
            manifest['run_values'][src.name] = {
                k.replace('/', '.') + '.value': v for k, (dt, v) in src.run_values.items()}
        for g in src.groups:
            for k in g.keys:
                data, tids = expected_for(w, w.segments[(src.name, k.name)])
                entry = {'source': src.name, 'key': k.name, 'group': g.name,
                         'is_array': not k.string, 'rows': int(len(tids)),
                         'train_ids': f'k{i}_tids.npy'}
                np.save(osp.join(exp_dir, f'k{i}_tids.npy'), tids)
                if k.string:   # run[source, key].ndarray() of a string key, decoded
                    entry['values'] = [v.decode() if isinstance(v, bytes) else str(v)
                                       for v in data.tolist()]
                else:
                    np.save(osp.join(exp_dir, f'k{i}.npy'), data)
                    entry['data'] = f'k{i}.npy'
                    entry['dtype'] = np.dtype(k.dtype).str
                    entry['shape'] = list(data.shape)
                    entry['attrs'] = {a: (v.decode() if isinstance(v, bytes) else v)
                                      for a, v in k.attrs.items()}
                manifest['keys'].append(entry)
                i += 1
        # Trains of this source written to more than one place (a data error).
        allt = [t for (sname, p), ts in w.file_trains.items() if sname == src.name for t in ts]
        dups = sorted({t for t in allt if allt.count(t) > 1})
        if dups:
            manifest['duplicates'][src.name] = dups
    if overview:
        manifest['overview'] = write_overview(w, run_tids, sources)
    with open(osp.join(exp_dir, 'expected.json'), 'w') as fh:
        json.dump(manifest, fh, indent=1)
    return run_dir


def expected_stack(outdir, manifest, key='image.data'):
    """AGIPD1M(run)[key].ndarray() of a run build() wrote, from the per-module expected arrays:
    every module's frames aligned by train (trains where a module has no data filled with 0, a
    leading length-1 entry axis dropped), and the train ID of every frame. The modules agree on
    the frame count of each train (asserted)."""
    exp = osp.join(outdir, 'expected')
    mods = sorted((k for k in manifest['keys'] if k['key'] == key),
                  key=lambda k: int(k['source'].split('/')[-1].split('CH')[0]))
    data = [np.load(osp.join(exp, k['data'])) for k in mods]
    tids = [np.load(osp.join(exp, k['train_ids'])) for k in mods]
    det_trains = np.unique(np.concatenate(tids))
    per_train = {}
    for t in tids:
        for tr, n in zip(*np.unique(t, return_counts=True)):
            assert per_train.setdefault(int(tr), n) == n   # modules agree
    frames = sum(per_train[int(t)] for t in det_trains)
    if data[0].ndim > 1 and data[0].shape[1] == 1:   # a leading length-1 entry axis: dropped
        data = [d[:, 0] for d in data]
    e = np.zeros((len(mods), frames) + data[0].shape[1:], data[0].dtype)
    for mi, (d, t) in enumerate(zip(data, tids)):
        pos = 0
        for tr in det_trains:
            n = per_train[int(tr)]
            rows = d[t == tr]
            if len(rows):
                e[mi, pos:pos + n] = rows
            pos += n
    return e, np.repeat(det_trains, [per_train[int(t)] for t in det_trains])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('outdir')
    ap.add_argument('--scenario', default='basic', choices=['basic', 'corr', 'dup', 'oldindex', 'bench'])
    ap.add_argument('--format', default='1.3', choices=['0.5', '1.0', '1.2', '1.3'])
    ap.add_argument('--overview', action='store_true')
    ap.add_argument('--modules', type=int, default=4)
    ap.add_argument('--small-images', action='store_true', help='(2, 16, 8) instead of (2, 512, 128)')
    ap.add_argument('--seq-files', type=int)
    ap.add_argument('--trains-per-file', type=int)
    a = ap.parse_args(argv)
    dims = (2, 16, 8) if a.small_images else (2, 512, 128)
    run_dir = build(a.outdir, a.scenario, a.format, a.overview, a.modules, dims,
                    a.seq_files, a.trains_per_file)
    print(run_dir)


if __name__ == '__main__':
    sys.exit(main())
