"""One `out[...] = np.load(X.npy, mmap_mode='r')` pass per fresh mount, with the counts that
explain it: the reader's page faults, the daemon's CPU, and stats.json (requests, bytes pushed,
chunks decoded, decode time). Used for the read-path traces in docs/benchmarks.md, "What each
mechanism buys".

usage: trace_mmap_pass.py MOUNT_BINARY SOURCE_DIR PASSES [MOUNT_OPTIONS]
(SOURCE_DIR holds frames.h5 with one dataset, as bench_matrix.py --workdir leaves them.)"""
import sys, os, time, json, resource
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np, benchlib
binary = sys.argv[1]; src = sys.argv[2]; n = int(sys.argv[3]); opts = sys.argv[4] if len(sys.argv) > 4 else None
for r in range(n):
    with benchlib.mount_h5direct(binary, src, opts=opts, workdir=os.path.dirname(os.path.abspath(src))) as m:
        p = os.path.join(m.mnt, 'frames.h5', 'data.npy')
        if not os.path.exists(p):
            p = os.path.join(m.mnt, 'frames.h5', sorted(x for x in os.listdir(os.path.join(m.mnt, 'frames.h5')) if x.endswith('.npy'))[0])
        out = None
        ru0 = resource.getrusage(resource.RUSAGE_SELF); c0 = m.cpu_seconds(); t0 = time.perf_counter()
        a = np.load(p, mmap_mode='r')
        if out is None: out = np.empty(a.shape, a.dtype)
        out[...] = a
        t1 = time.perf_counter(); ru1 = resource.getrusage(resource.RUSAGE_SELF); c1 = m.cpu_seconds()
        back = out.ctypes.data > a.ctypes.data
        del a
        s = json.load(open(os.path.join(m.mnt, '.h5direct', 'stats.json'))) if os.path.exists(os.path.join(m.mnt, '.h5direct', 'stats.json')) else {}
        print(f"{t1-t0:.3f}s {'BACK' if back else 'fwd '} minflt {ru1.ru_minflt-ru0.ru_minflt} majflt {ru1.ru_majflt-ru0.ru_majflt} daemonCPU {c1-c0:.2f} reads {s.get('reads')} pushed {s.get('bytes_pushed',0)>>20}M decoded {s.get('chunks_decoded')} dec_s {s.get('decode_seconds',0):.2f}", flush=True)
        del out
