"""Sizes that are true, errors that can be found, metrics that parse.

- Every generated text file (dataset .json, .attrs.json, run.json, a key's .json) reports its
  real size at its first stat, before anything opened it: `tar` of a mounted tree (the oracle:
  GNU tar, which archives st_size bytes) equals the files read one by one, and in a walk every
  text file's st_size is len() of what a read returns.
- A provoked error (a damaged chunk) shows in .h5direct/log and in stats.json's recent_errors,
  naming the file, the dataset and the chunk; a truncated file's error says it is truncated and
  at which sizes (the oracle: h5py's own "truncated file: eof=N, stored_eof=M").
- .h5direct/metrics parses as Prometheus text exposition format (a strict parser here) and
  agrees with stats.json read around it.
"""
import errno
import json
import math
import os
import os.path as osp
import re
import subprocess
import tarfile

import h5py
import numpy as np
import pytest

import euxfel_mock
import h5d_testlib as tl
from h5d_testlib import Mount, make_tmpdir

TEXT_SUFFIXES = ('.json',)


def write_plain(path, n=150):
    """A file with attributes on the root, on a group and on datasets; `n` datasets in /many
    (more than a batch of sidecar details), a string dataset (only a .json), a scalar."""
    rng = np.random.default_rng(7)
    with h5py.File(path, 'w') as f:
        f.attrs['title'] = 'observability test'
        f.attrs['numbers'] = np.arange(5)
        g = f.create_group('many')
        g.attrs['about'] = 'x' * 300
        for i in range(n):
            d = g.create_dataset(f'd{i:04d}', data=rng.random(3 + i % 5))
            d.attrs['index'] = i
            d.attrs['label'] = f'dataset number {i}' * (1 + i % 4)
        f['text'] = 'a string, not an array'
        f['scalar'] = 3.5
        f.create_dataset('chunked', data=np.arange(1000, dtype='<i4'), chunks=(100,), compression='gzip')
        f['chunked'].attrs['unit'] = 'counts'


def read_bytes(path):
    with open(path, 'rb') as fh:
        return fh.read()


def tar_equals_reads(tmp, top, exclude=()):
    """tar of `top` (a fresh mount: nothing opened before), extracted, equals every member read
    through the mount; returns the number of text files checked. The control directory's files
    are live counters (their size is a snapshot), not archived."""
    tar_path = osp.join(tmp, 't.tar')
    subprocess.run(['tar', 'cf', tar_path, '--exclude=./.h5direct'] + [f'--exclude={x}' for x in exclude]
                   + ['-C', top, '.'], check=True)
    texts = 0
    with tarfile.open(tar_path) as t:
        for m in t.getmembers():
            if not m.isfile():
                continue
            got = t.extractfile(m).read()
            want = read_bytes(osp.join(top, m.name))
            assert got == want, m.name
            assert m.size == len(want), m.name
            if m.name.endswith(TEXT_SUFFIXES):
                texts += 1
                assert want, m.name
                json.loads(want)  # whole JSON, not cut short
    return texts


def stat_equals_read(top):
    """In a walk of a fresh mount: every text file's st_size, taken before it is opened, is the
    length of what a read returns."""
    n = 0
    for d, dirs, files in os.walk(top):
        dirs[:] = [x for x in dirs if x != '.h5direct']
        for name in files:
            if not name.endswith(TEXT_SUFFIXES):
                continue
            p = osp.join(d, name)
            size = os.stat(p).st_size
            assert size == len(read_bytes(p)), p
            assert size > 0, p
            n += 1
    return n


def test_plain_file_sizes_and_tar():
    tmp = make_tmpdir('h5d-obs-')
    src = osp.join(tmp, 'a.h5')
    write_plain(src)
    m = Mount(src)
    try:
        assert tar_equals_reads(tmp, m.mnt) >= 150 + 4
        # The content is the file's: attributes as h5py reads them.
        side = json.loads(read_bytes(m.path('many', 'd0007.json')))
        assert 'dataset number 7' in json.dumps(side)
        root = json.loads(read_bytes(m.path('.attrs.json')))
        assert 'observability test' in json.dumps(root)
    finally:
        m.close()
    m = Mount(src)
    try:
        assert stat_equals_read(m.mnt) >= 150 + 4
        # ls -l of the group stats its 150 sidecars: their details came in batches, not one
        # request each (the helper requests stay well below one per sidecar).
    finally:
        m.close()


def test_batched_details_for_stat():
    tmp = make_tmpdir('h5d-obs-')
    src = osp.join(tmp, 'a.h5')
    write_plain(src, n=200)
    m = Mount(src)
    try:
        names = sorted(os.listdir(m.path('many')))
        before = m.stats()['hdf5_helper']['requests']
        sizes = {n: os.stat(m.path('many', n)).st_size for n in names if n.endswith('.json')}
        after = m.stats()['hdf5_helper']['requests']
        assert len(sizes) == 201  # 200 datasets and the group's .attrs.json
        # 200 sidecars in batches of at most 64 (4 requests), the group's attributes (1): far
        # below one request per sidecar.
        assert after - before <= 10, (before, after)
        for n, s in sizes.items():
            assert s == len(read_bytes(m.path('many', n)))
    finally:
        m.close()


def test_euxfel_run_sizes_and_tar():
    tmp = make_tmpdir('h5d-obs-')
    out = osp.join(tmp, 'data')
    run = euxfel_mock.build(out, image_dims=(2, 16, 8))
    m = Mount(run)
    try:
        # The mock's modules disagree on cell IDs: those two files fail to open, as EXtra-data
        # raises (docs/euxfel.md).
        assert tar_equals_reads(tmp, m.mnt, exclude=('.cell_ids', '.pulse_ids')) > 5
    finally:
        m.close()
    m = Mount(run)
    try:
        assert stat_equals_read(m.mnt) > 5
        assert os.stat(m.path('run.json')).st_size == len(read_bytes(m.path('run.json')))
    finally:
        m.close()


def mount_corrupt():
    """A mount of write_corrupt_chunk_file's file (chunk 3 of /z damaged): (source, mount)."""
    src = osp.join(make_tmpdir('h5d-obs-'), 'bad.h5')
    tl.write_corrupt_chunk_file(src)
    return src, Mount(src)


def _recent(m):
    return m.stats()['recent_errors']


def test_damaged_chunk_is_found_in_log_and_stats():
    src, m = mount_corrupt()
    try:
        with open(m.path('z.raw'), 'rb') as fh:
            fh.seek(30000 * 4)
            with pytest.raises(OSError) as e:
                fh.read(4)
        assert e.value.errno == errno.EIO
        log = read_bytes(m.path('.h5direct', 'log')).decode()
        lines = [ln for ln in log.splitlines() if 'bad.h5' in ln and '/z' in ln and 'chunk (3)' in ln]
        assert lines, log
        assert re.match(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z error: ', lines[-1]), lines[-1]
        recent = [r for r in _recent(m) if r['dataset'] == '/z']
        assert recent, _recent(m)
        r = recent[-1]
        assert r['file'] == osp.realpath(src)
        assert r['chunk'] == '(3)'
        assert r['errno'] == 'EIO'
        assert 'chunk (3)' in r['reason']
        assert re.match(r'^\d{4}-\d\d-\d\dT', r['time'])
        # The good dataset still reads, and the error counters agree.
        assert np.array_equal(np.load(m.path('good.npy')), np.arange(1000, dtype='<i4'))
        s = m.stats()
        assert s['error_replies']['EIO'] >= 1 and s['errors']['io'] >= 1
    finally:
        m.close()


def test_each_failed_read_is_logged_once():
    """One failure, one line: the kernel asks again for the page a failed read needed (a failed
    read-ahead, then the page itself; a mapping's fault two or three times), and each of those
    requests fails on the same damaged chunk. Three readers each meet the damaged chunk once: a
    pread, a mapping (the process dies of SIGBUS) and cat, each through another virtual file;
    the log has one error line for each, naming the chunk, and stats.json keeps three recent
    errors, while every error reply is still counted."""
    d = make_tmpdir('h5d-obs-once-')
    for name in ('a.h5', 'b.h5'):
        tl.write_corrupt_chunk_file(osp.join(d, name))
    m = Mount(d)
    try:
        fd = os.open(m.path('a.h5', 'z.raw'), os.O_RDONLY)
        try:
            with pytest.raises(OSError) as e:
                os.pread(fd, 4, 35000 * 4)
            assert e.value.errno == errno.EIO
        finally:
            os.close(fd)
        touch = ("import numpy as np; a = np.load(%r, mmap_mode='r'); print(int(a[35000]))"
                 % m.path('a.h5', 'z.npy'))
        r = subprocess.run(['/usr/bin/python3', '-c', touch], capture_output=True, timeout=60)
        assert r.returncode == -7, r   # SIGBUS: the page cannot be read
        r = subprocess.run(['cat', m.path('b.h5', 'z.raw')], capture_output=True, timeout=60)
        assert r.returncode != 0 and b'Input/output error' in r.stderr, r
        lines = [ln for ln in m.log().splitlines() if ': error: ' in ln]
        assert len(lines) == 3, '\n'.join(lines)
        assert all('/z: chunk (3)' in ln for ln in lines), lines
        assert sum('a.h5:/z' in ln for ln in lines) == 2 and sum('b.h5:/z' in ln for ln in lines) == 1
        s = m.stats()
        assert len([r for r in s['recent_errors'] if r['chunk'] == '(3)']) == 3, s['recent_errors']
        assert s['errors_reported'] == 3
        assert s['error_replies']['EIO'] >= 3 and s['errors']['io'] == s['error_replies']['EIO']
    finally:
        m.close()


def h5py_truncation(path):
    """(eof, stored_eof) from h5py's refusal of a truncated file: the independent oracle."""
    with pytest.raises(OSError) as e:
        h5py.File(path, 'r')
    got = re.search(r'eof\s*=\s*(\d+).*stored_eof\s*=\s*(\d+)', str(e.value))
    assert got, str(e.value)
    return int(got.group(1)), int(got.group(2))


def test_truncated_file_error_names_both_sizes():
    tmp = make_tmpdir('h5d-obs-')
    src = osp.join(tmp, 'cut.h5')
    with h5py.File(src, 'w', libver='earliest') as f:
        f.create_dataset('early', data=np.arange(64, dtype='<i4'))
        f.create_dataset('late', data=np.arange(100000, dtype='<i4'), chunks=(10000,))
        late_end = max(f['late'].id.get_chunk_info(i).byte_offset for i in range(10))
    size = os.path.getsize(src)
    cut = late_end - 100  # through the last chunk's data, after all metadata
    with open(src, 'r+b') as fh:
        fh.truncate(cut)
    eof, stored = h5py_truncation(src)
    assert eof == cut and stored == size
    m = Mount(src)
    try:
        assert np.array_equal(np.load(m.path('early.npy')), np.arange(64, dtype='<i4'))
        with open(m.path('late.raw'), 'rb') as fh:
            fh.seek(9 * 10000 * 4)
            with pytest.raises(OSError) as e:
                fh.read(4)
        assert e.value.errno == errno.EIO
        want = f'truncated file: {eof} bytes, its superblock says {stored}'
        log = read_bytes(m.path('.h5direct', 'log')).decode()
        assert any(want in ln and '/late' in ln for ln in log.splitlines()), log
        assert any(want in r['reason'] and r['dataset'] == '/late' for r in _recent(m))
    finally:
        m.close()


def test_truncated_metadata_error_names_both_sizes():
    """A cut through a group's metadata: listing it fails, saying truncated (libhdf5's own
    reason alone was "link iteration failed")."""
    tmp = make_tmpdir('h5d-obs-')
    src = osp.join(tmp, 'cutmeta.h5')
    with h5py.File(src, 'w', libver='earliest') as f:
        f.create_dataset('early', data=np.arange(20000, dtype='<i4'))
        g = f.create_group('g')
        for i in range(40):
            g.create_dataset(f'x{i}', data=np.arange(4))
    size = os.path.getsize(src)
    seen = False
    # Cuts at several points of the metadata written last: every failure must say truncated.
    for cut in range(size - 4000, size - 100, 500):
        c = osp.join(tmp, f'c{cut}.h5')
        with open(src, 'rb') as a, open(c, 'wb') as b:
            b.write(a.read(cut))
        eof, stored = h5py_truncation(c)
        want = f'truncated file: {eof} bytes, its superblock says {stored}'
        m = Mount(c)
        try:
            for d, dirs, files in os.walk(m.mnt):
                dirs[:] = [x for x in dirs if x != '.h5direct']
                for n in files:
                    try:
                        read_bytes(osp.join(d, n))
                    except OSError:
                        pass
            for r in _recent(m):
                if r['errno'] == 'EIO':
                    assert want in r['reason'], r
                    seen = True
        except OSError:
            pass
        finally:
            m.close()
    assert seen


# ---- Prometheus text exposition format (version 0.0.4), strictly --------------------------

NAME = r'[a-zA-Z_:][a-zA-Z0-9_:]*'
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*'
VALUE = r'(?:[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN)'
LABEL_VALUE = r'"(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(rf'^({NAME})(?:\{{({LABEL}={LABEL_VALUE}(?:,{LABEL}={LABEL_VALUE})*)?,?\}})? ({VALUE})(?: -?\d+)?$')


def parse_prometheus(text):
    """{(name, ((label, value), ...)): float}; raises AssertionError on anything malformed: a
    sample before its family's HELP/TYPE, a family split, a type other than counter/gauge,
    a counter not ending in _total, a repeated sample."""
    assert text.endswith('\n')
    samples = {}
    helped, typed, closed = set(), {}, set()
    current = None
    for ln in text[:-1].split('\n'):
        assert ln, 'empty line'
        if ln.startswith('# HELP '):
            name = ln.split(' ')[2]
            assert re.fullmatch(NAME, name) and name not in helped, ln
            helped.add(name)
            continue
        if ln.startswith('# TYPE '):
            parts = ln.split(' ')
            assert len(parts) == 4 and re.fullmatch(NAME, parts[2]), ln
            assert parts[2] not in typed and parts[3] in ('counter', 'gauge'), ln
            assert parts[2] in helped, 'TYPE before HELP: ' + ln
            typed[parts[2]] = parts[3]
            continue
        assert not ln.startswith('#'), ln
        mt = SAMPLE.match(ln)
        assert mt, 'malformed sample: ' + ln
        name, labels, value = mt.group(1), mt.group(2), mt.group(3)
        assert name.startswith('h5direct_'), ln
        assert name in typed, 'sample before its TYPE: ' + ln
        if typed[name] == 'counter':
            assert name.endswith('_total'), ln
        if current != name:
            assert name not in closed, 'family split: ' + ln
            if current:
                closed.add(current)
            current = name
        pairs = tuple(re.findall(rf'({LABEL})=({LABEL_VALUE})', labels or ''))
        key = (name, pairs)
        assert key not in samples, 'repeated sample: ' + ln
        v = float(value.replace('Inf', 'inf'))
        if typed[name] == 'counter':
            assert v >= 0 and not math.isnan(v), ln
        samples[key] = v
    return samples


def test_metrics_parse_and_agree_with_stats():
    src, m = mount_corrupt()
    try:
        np.load(m.path('good.npy'))
        with open(m.path('z.raw'), 'rb') as fh:
            fh.read(10000 * 4)
            fh.seek(30000 * 4)
            with pytest.raises(OSError):
                fh.read(4)
        before = m.stats()
        text = read_bytes(m.path('.h5direct', 'metrics')).decode()
        after = m.stats()
        samples = parse_prometheus(text)

        def between(metric, path, labels=()):
            v = samples[('h5direct_' + metric, labels)]
            lo, hi = before, after
            for k in path:
                lo, hi = lo[k], hi[k]
            assert lo <= v <= hi, (metric, lo, v, hi)
            return v

        assert between('bytes_served_total', ['bytes_served']) > 0
        between('reads_total', ['reads'])
        assert between('chunks_decoded_total', ['chunks_decoded']) >= 1
        assert between('bytes_decoded_total', ['bytes_decoded']) >= 40000
        assert between('bytes_pread_total', ['bytes_pread']) > 0
        between('cache_hits_total', ['cache_hits'])
        between('cache_misses_total', ['cache_misses'])
        between('hdf5_helper_requests_total', ['hdf5_helper', 'requests'])
        between('hdf5_helper_failures_total', ['hdf5_helper', 'failures'])
        assert between('errors_total', ['errors', 'io'], (('class', '"io"'),)) >= 1
        assert between('error_replies_total', ['error_replies', 'EIO'], (('errno', '"EIO"'),)) >= 1
        assert between('errors_reported_total', ['errors_reported']) >= 1
        for (name, labels), v in samples.items():
            if name == 'h5direct_chunk_cache_budget_bytes':
                assert v == after['chunk_cache']['budget']
        # Every stats.json number has its metric.
        assert len(samples) >= 25
    finally:
        m.close()


def test_log_is_bounded():
    """.h5direct/log keeps at most 1,000 lines and 256 KiB, and stats.json at most 100 recent
    errors, however many errors there were."""
    src, m = mount_corrupt()
    try:
        for _ in range(1200):
            with open(m.path('z.raw'), 'rb') as fh:
                fh.seek(30000 * 4)
                try:
                    fh.read(4)
                except OSError:
                    pass
        log = read_bytes(m.path('.h5direct', 'log'))
        assert len(log) <= 256 * 1024
        assert len(log.splitlines()) <= 1000
        assert b'chunk (3)' in log
        assert len(_recent(m)) <= 100
    finally:
        m.close()
