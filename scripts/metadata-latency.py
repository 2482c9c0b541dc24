#!/usr/bin/env python3
# Per-operation latency through a mount (docs/guide/metadata-path.md): median microseconds of
# create+close, stat, open, close and unlink of 300 names in a directory made through ROOT,
# then in one made through OTHER (a second mount of the same deployment).
#   python3 scripts/metadata-latency.py ROOT [OTHER]
import os, sys, time, statistics
root = sys.argv[1]; other = sys.argv[2] if len(sys.argv) > 2 else None
N = 300
def med(f, names):
    t = []
    for n in names:
        a = time.perf_counter_ns(); f(n); t.append(time.perf_counter_ns() - a)
    return statistics.median(t) / 1000
def run(d, label):
    names = [f"{d}/f{i}" for i in range(N)]
    miss = [f"{d}/m{i}" for i in range(N)]
    r = {}
    r['stat missing'] = med(lambda n: os.path.exists(n), miss)
    r['create+close'] = med(lambda n: os.close(os.open(n, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)), names)
    time.sleep(1.2)  # past the attribute TTL
    r['stat'] = med(os.stat, names)
    r['stat cached'] = med(os.stat, names)
    fds = {}
    r['open'] = med(lambda n: fds.__setitem__(n, os.open(n, os.O_RDONLY)), names)
    r['close'] = med(lambda n: os.close(fds[n]), names)
    time.sleep(1.2)
    r['unlink'] = med(os.unlink, names)
    print(label, " ".join(f"{k}={v:.1f}" for k, v in r.items()), flush=True)
d = f"{root}/fresh{os.getpid()}"; os.mkdir(d); run(d, "fresh")
if other:
    os.mkdir(f"{other}/old{os.getpid()}")
    run(f"{root}/old{os.getpid()}", "made-elsewhere")
