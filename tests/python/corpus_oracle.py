#!/usr/bin/python3
"""h5py's view of HDF5 files, one file per line, for test_corpus.py and test_mutation.py.

Reads file paths on stdin; for each prints one JSON line: {"file", "datasets": [{"path",
"status", "dtype", "shape", "nbytes", "sha256"}], "error"}. status: "ok" (sha256 of the C-order
bytes of dset[()]), "not_array" (vlen, references, ... : no .npy), "error" (h5py raised).
Attributes are never read (h5py crashes on some files when it iterates them). Runs in its own
process: libhdf5 may crash on these files, and the caller then restarts it.
"""
import hashlib
import json
import sys

import h5py
import numpy as np

MAX_BYTES = 256 << 20


def describe(f):
    out = []

    def visit(name, obj):
        if not isinstance(obj, h5py.Dataset):
            return
        d = {'path': '/' + name}
        try:
            dt = obj.dtype
            d['dtype'] = dt.str if dt.names is None else str(dt.descr)
            d['shape'] = list(obj.shape) if obj.shape is not None else None
            if obj.shape is None or dt.hasobject or h5py.check_dtype(vlen=dt) is not None \
                    or h5py.check_dtype(ref=dt) is not None:
                d['status'] = 'not_array'
            elif obj.size * dt.itemsize > MAX_BYTES:
                d['status'] = 'too_big'
            else:
                a = np.ascontiguousarray(obj[()])
                d['nbytes'] = a.nbytes
                d['sha256'] = hashlib.sha256(a.tobytes()).hexdigest()
                d['dtype'] = a.dtype.str if a.dtype.names is None else str(a.dtype.descr)
                d['status'] = 'ok'
        except Exception as e:  # noqa: BLE001 - h5py's own errors are the oracle's answer
            d['status'] = 'error'
            d['error'] = f'{type(e).__name__}: {e}'[:300]
        out.append(d)

    f.visititems(visit)
    return out


def main():
    for line in sys.stdin:
        path = line.rstrip('\n')
        r = {'file': path}
        try:
            with h5py.File(path, 'r') as f:
                r['datasets'] = describe(f)
        except Exception as e:  # noqa: BLE001
            r['error'] = f'{type(e).__name__}: {e}'[:300]
            r['datasets'] = []
        print(json.dumps(r), flush=True)


if __name__ == '__main__':
    main()
