# Reads Darshan logs with PyDarshan and prints, as one JSON list on stdout, the facts of each
# log that an Eddy job profile is made of (crates/eddy-history/src/darshan.rs maps them; the
# rules are in docs/decisions and in that module's header). Every number comes from PyDarshan:
# the job metadata, the records' DataFrames (`to_df`), libdarshan-util's accumulator
# (`accumulate_records`) and the DXT traces. Nothing here parses the binary format.
#
# Usage: python darshan_profile.py LOG.darshan...   (or the same text on stdin: python - LOG...)

import hashlib
import json
import sys
import warnings

warnings.simplefilter("ignore")

try:
    import darshan
    from darshan.backend.cffi_backend import accumulate_records
except ImportError as e:
    print(f"PyDarshan is not importable by {sys.executable}: {e}", file=sys.stderr)
    sys.exit(3)

# The I/O layers counted, and the prefix of their counters. MPI-IO sits on POSIX: its bytes
# count only for files POSIX did not see (see `counted_records`).
LAYERS = (("POSIX", "POSIX"), ("STDIO", "STDIO"), ("MPI-IO", "MPIIO"))

# Darshan's request-size bins, in the order of its POSIX_SIZE_READ_* / _WRITE_* counters.
SIZE_BINS = ("0_100", "100_1K", "1K_10K", "10K_100K", "100K_1M", "1M_4M", "4M_10M",
             "10M_100M", "100M_1G", "1G_PLUS")

# Counters that are operations, per layer: data (reads, writes) and metadata.
DATA_OPS = {
    "POSIX": ("POSIX_READS", "POSIX_WRITES"),
    "STDIO": ("STDIO_READS", "STDIO_WRITES"),
    "MPI-IO": ("MPIIO_INDEP_READS", "MPIIO_INDEP_WRITES", "MPIIO_COLL_READS",
               "MPIIO_COLL_WRITES", "MPIIO_SPLIT_READS", "MPIIO_SPLIT_WRITES",
               "MPIIO_NB_READS", "MPIIO_NB_WRITES"),
}
META_OPS = {
    "POSIX": ("POSIX_OPENS", "POSIX_STATS", "POSIX_SEEKS", "POSIX_FSYNCS", "POSIX_FDSYNCS",
              "POSIX_RENAME_SOURCES"),
    "STDIO": ("STDIO_OPENS", "STDIO_FDOPENS", "STDIO_SEEKS", "STDIO_FLUSHES"),
    "MPI-IO": ("MPIIO_INDEP_OPENS", "MPIIO_COLL_OPENS", "MPIIO_SYNCS"),
}

# At most this many points in the DXT time series, and points at least a second wide.
SERIES_POINTS = 300


def counted_records(report):
    """The records of each counted layer, as PyDarshan DataFrames: POSIX and STDIO whole,
    MPI-IO only for the files no POSIX record names (MPI-IO's bytes are POSIX's bytes again
    when POSIX saw the file)."""
    out = {}
    posix_ids = set()
    if "POSIX" in report.records:
        df = report.records["POSIX"].to_df()
        posix_ids = set(int(i) for i in df["counters"]["id"])
        out["POSIX"] = df
    if "STDIO" in report.records:
        out["STDIO"] = report.records["STDIO"].to_df()
    if "MPI-IO" in report.records:
        df = report.records["MPI-IO"].to_df()
        keep = ~df["counters"]["id"].astype("uint64").isin(posix_ids)
        if keep.any():
            out["MPI-IO"] = {
                "counters": df["counters"][keep].reset_index(drop=True),
                "fcounters": df["fcounters"][keep].reset_index(drop=True),
            }
    return out


def log_facts(path):
    report = darshan.DarshanReport(path, read_all=True)
    job = report.metadata["job"]
    nprocs = int(job["nprocs"])
    start = job["start_time_sec"] + job.get("start_time_nsec", 0) / 1e9
    run_time = float(job.get("run_time", 0.0))
    exe = report.metadata.get("exe", "") or ""

    layers = counted_records(report)
    read_bytes = written_bytes = data_ops = metadata_ops = 0
    io_time = 0.0
    file_bytes = {}  # file id -> bytes moved
    file_ranks = {}  # file id -> ranks with a record of it (-1: all)
    io_ranks = set()  # ranks with a record that moved bytes (-1: all)
    rank_bytes = {}  # rank -> bytes; rank -> seconds of I/O (shared records spread)
    rank_time = {}
    shared_bytes_per_rank = 0.0
    shared_time = 0.0
    read_sizes = [0] * len(SIZE_BINS)
    write_sizes = [0] * len(SIZE_BINS)

    for mod, prefix in LAYERS:
        if mod not in layers:
            continue
        df = layers[mod]
        c, f = df["counters"], df["fcounters"]
        if len(c) == 0:
            continue
        # libdarshan-util's own aggregation: the I/O time of the slowest rank, the time its
        # "I/O performance estimate" divides by.
        acc = accumulate_records(df, mod, nprocs)
        io_time += float(acc.derived_metrics.agg_time_by_slowest)
        rd, wr = c[f"{prefix}_BYTES_READ"], c[f"{prefix}_BYTES_WRITTEN"]
        read_bytes += int(rd.sum())
        written_bytes += int(wr.sum())
        data_ops += int(sum(int(c[k].sum()) for k in DATA_OPS[mod] if k in c))
        metadata_ops += int(sum(int(c[k].sum()) for k in META_OPS[mod] if k in c))
        if mod == "POSIX" or mod == "MPI-IO":
            agg = "" if mod == "POSIX" else "AGG_"
            for i, b in enumerate(SIZE_BINS):
                read_sizes[i] += int(c[f"{prefix}_SIZE_READ_{agg}{b}"].sum())
                write_sizes[i] += int(c[f"{prefix}_SIZE_WRITE_{agg}{b}"].sum())
        secs = (f[f"{prefix}_F_READ_TIME"] + f[f"{prefix}_F_WRITE_TIME"]
                + f[f"{prefix}_F_META_TIME"])
        for i in range(len(c)):
            fid = int(c["id"].iloc[i])
            rank = int(c["rank"].iloc[i])
            file_ranks.setdefault(fid, set()).add(rank)
            moved = int(rd.iloc[i]) + int(wr.iloc[i])
            if moved <= 0:
                continue
            file_bytes[fid] = file_bytes.get(fid, 0) + moved
            io_ranks.add(rank)
            if rank < 0:
                # A shared record: every rank opened the file; its bytes are spread over them,
                # and each is taken to have spent the slowest rank's time on it.
                shared_bytes_per_rank += moved / max(nprocs, 1)
                shared_time += float(f[f"{prefix}_F_SLOWEST_RANK_TIME"].iloc[i])
            else:
                rank_bytes[rank] = rank_bytes.get(rank, 0) + moved
                rank_time[rank] = rank_time.get(rank, 0.0) + float(secs.iloc[i])

    # Shared: a file with data that more than one process has a record of (a record of rank
    # -1 stands for every rank), whether or not each of them moved bytes: Darshan's own
    # "shared" and "partially shared" categories.
    def processes(ranks):
        return nprocs if -1 in ranks else len(ranks)

    shared = {fid for fid in file_bytes if processes(file_ranks[fid]) > 1}
    # A shared record with bytes: every rank took part (Darshan reduced it over all ranks).
    all_ranks_io = -1 in io_ranks
    io_ranks = set(range(nprocs)) if all_ranks_io else io_ranks
    # Per process bandwidth: bytes over the seconds it spent in I/O calls.
    per_rank = []
    for r in io_ranks:
        b = rank_bytes.get(r, 0) + (shared_bytes_per_rank if all_ranks_io else 0.0)
        t = rank_time.get(r, 0.0) + (shared_time if all_ranks_io else 0.0)
        per_rank.append((b, t))
    rank_bw = [b / t for b, t in per_rank if t > 0]
    total_rank_time = sum(t for _, t in per_rank)

    return {
        "path": path,
        "job_id": str(job["jobid"]),
        "uid": int(job["uid"]),
        "nprocs": nprocs,
        "start": start,
        "run_time": run_time,
        "exe": exe,
        "exe_sha256": hashlib.sha256(exe.encode()).hexdigest() if exe else None,
        "modules": list(report.modules),
        "read_bytes": read_bytes,
        "written_bytes": written_bytes,
        "files": len(file_bytes),
        "shared_files": len(shared),
        "shared_bytes": sum(file_bytes[fid] for fid in shared),
        "io_processes": len(io_ranks),
        "data_ops": data_ops,
        "metadata_ops": metadata_ops,
        "read_sizes": read_sizes,
        "write_sizes": write_sizes,
        "io_time": io_time,
        "peak_process_bandwidth": max(rank_bw) if rank_bw else 0.0,
        "mean_process_bandwidth": (sum(b for b, _ in per_rank) / total_rank_time
                                   if total_rank_time > 0 else 0.0),
        "dxt": dxt_facts(report, run_time),
    }


def dxt_facts(report, run_time):
    """The DXT POSIX trace, when the log has one: the hosts that did I/O and the job's bytes
    and operations per time bin (a segment counts in the bin of its midpoint)."""
    if "DXT_POSIX" not in report.records:
        return None
    traces = report.records["DXT_POSIX"].to_df()
    width = max(1.0, run_time / SERIES_POINTS)
    bins = {}
    hosts = set()
    for t in traces:
        for kind in ("read", "write"):
            seg = t[f"{kind}_segments"]
            if len(seg) == 0:
                continue
            hosts.add(t["hostname"])
            mids = (seg["start_time"] + seg["end_time"]) / 2
            for mid, length in zip(mids, seg["length"]):
                b = bins.setdefault(int(max(mid, 0.0) // width), [0, 0, 0])
                b[0 if kind == "read" else 1] += int(length)
                b[2] += 1
    return {
        "hosts": sorted(hosts),
        "bins": [{"t": i * width, "seconds": width, "read_bytes": v[0], "write_bytes": v[1],
                  "ops": v[2]} for i, v in sorted(bins.items())],
    }


def main(paths):
    facts = []
    for p in paths:
        try:
            facts.append(log_facts(p))
        except Exception as e:  # noqa: BLE001 -- any failure names the log it came from
            print(f"{p}: PyDarshan cannot read it as a Darshan log: {type(e).__name__}: {e}",
                  file=sys.stderr)
            sys.exit(2)
    json.dump(facts, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
