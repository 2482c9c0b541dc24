#!/usr/bin/env python3
"""The client in layers (decision 0068): only `namespace/` and `data/` send requests.

crates/eddy-client/src has two layers that send requests to the daemons, `namespace/` (names
and the records they lead to: sent to the owner of a path's metadata or to the holders of a
file's identity record) and `data/` (a file's bytes and the daemons that store them: sent to
the owners of a file's chunks, or to daemons as stores), under the `Client` façade. Fails when:

- a file outside `namespace/` and `data/` makes a call that sends: a method of the rpc layer
  that sends (`rpc().call(`, `try_call(`, `call_raw(`, `send(`, `all(`, `all_ok(`,
  `failover_to(`), or one of the layers' own senders (`meta(`, `meta_raw(`, `failover(`,
  `failover_as(`, `on_identity(`, `on_identity_raw(`);
- a file outside the layers builds a request (`req::X`, `Request::X`);
- `namespace/` builds a request of the data layer, or `data/` one of the namespace layer
  (the two lists below, NAMESPACE and DATA);
- a request of eddy-proto's request table (`request_table!` in
  crates/eddy-proto/src/msg/table.rs) is in none of NAMESPACE, DATA and NOT_SENT (a new
  request is placed in a layer here, or said not to be the client's), or in more than one,
  or a name here is not in the table; a request of NOT_SENT built anywhere in the client.

Comments are not read. `--map` prints, for every file of the client, the requests it builds
and how many sending calls it makes (the map of decision 0068).

Usage: scripts/check-client-layers.py             check the repository, exit 1 on a finding
       scripts/check-client-layers.py --map       print the map
       scripts/check-client-layers.py --self-test check the check on built-in fixtures
Python 3 standard library only; needs no build.
"""

import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIENT = os.path.join("crates", "eddy-client", "src")
TABLE = os.path.join("crates", "eddy-proto", "src", "msg", "table.rs")
LAYERS = ("namespace", "data")

# Sent to the owner of a path's metadata, the holders of a file's identity record, or every
# daemon about names (listings, renames under way, locks of a file).
NAMESPACE = {
    "Create", "Stat", "Remove", "SetAttr", "GrowSize", "ReserveAppend", "Insert", "Readdir",
    "HasChildren", "ListSubtree", "Link", "DropName", "OnIdentity", "Validate",
    "BackendRename", "Rebind", "SetXattr", "GetXattr", "ListXattr", "RemoveXattr", "Lock",
    "TestLock", "ReleaseLocks", "ReclaimLock", "LockHolders", "WaitsFor", "BeginRename",
    "ClaimRenames", "EndRename", "ReleaseRename", "TouchDir", "ClearSetId", "CountSubdirs",
    "BackendLink", "LinkedNames", "Accessed", "Lease", "LeaseNote", "LeaseWait", "LeaseReturn",
    "Batch",
}
# Sent to the owners of a file's chunks (and their copies), or to daemons as stores.
DATA = {
    "Write", "Read", "Prefetch", "FlushDirty", "Unpin", "TruncateData", "RemoveData", "Sync",
    "FinalizeDirty", "Status", "Shutdown", "Allocate", "Scrub", "Hint", "CheckBackend",
    "HoldBack", "WrittenBack", "Stats", "DirectOpen", "DirectCommit", "ShutdownWithStats", "Membership",
}
# Sent by daemons to their peers, or by the rpc layer on each connection it opens (Identify,
# a mount's Mounted): never built by the client.
NOT_SENT = {"Replicate", "PutChunk", "RepairFor", "Repair", "Identify", "Recall", "Mounted", "Epoch"}

TABLE_LINE = re.compile(r"^\s*([A-Z]\w*) \"\w+\" \{", re.M)
BUILDS = re.compile(r"\b(?:req|Request)::([A-Z]\w*)")
SENDS = re.compile(
    r"(?:\brpc(?:\(\))?\s*\.\s*(?:call|call_raw|try_call|send|all|all_ok|failover_to)"
    r"|\.\s*(?:meta|meta_raw|failover|failover_as|on_identity|on_identity_raw))"
    r"\s*(?:::<[^()]*>)?\s*\("
)


def strip_comments(text):
    """The code alone: `//` comments dropped and the insides of string literals blanked
    (a string may span lines), line numbers kept."""
    out = []
    in_str = False
    for line in text.split("\n"):
        kept = []
        i = 0
        while i < len(line):
            c = line[i]
            if in_str:
                if c == "\\":
                    i += 2
                    continue
                if c == '"':
                    in_str = False
                    kept.append(c)
            elif c == '"':
                in_str = True
                kept.append(c)
            elif c == "'" and i + 2 < len(line) and line[i + 2] == "'":
                i += 3
                continue
            elif line.startswith("//", i):
                break
            else:
                kept.append(c)
            i += 1
        out.append("".join(kept))
    return "\n".join(out)


def table_requests(root):
    with open(os.path.join(root, TABLE), encoding="utf-8") as f:
        text = f.read()
    start = text.index("macro_rules! request_table")
    body = text[start : text.index("\n}\n", start)]
    return TABLE_LINE.findall(body)


def client_files(root):
    base = os.path.join(root, CLIENT)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".rs"):
                full = os.path.join(dirpath, name)
                yield os.path.relpath(full, base), full


def layer_of(rel):
    first = rel.split(os.sep)[0]
    return first if first in LAYERS else None


def survey(root):
    """(relative path, layer, requests built {name: line}, sending calls [line])."""
    out = []
    for rel, full in client_files(root):
        with open(full, encoding="utf-8") as f:
            text = strip_comments(f.read())
        built = {}
        for m in BUILDS.finditer(text):
            built.setdefault(m.group(1), text.count("\n", 0, m.start()) + 1)
        sends = [text.count("\n", 0, m.start()) + 1 for m in SENDS.finditer(text)]
        out.append((rel, layer_of(rel), built, sends))
    return out


def check(root):
    problems = []
    table = table_requests(root)
    classes = {"NAMESPACE": NAMESPACE, "DATA": DATA, "NOT_SENT": NOT_SENT}
    for name in table:
        homes = [k for k, v in classes.items() if name in v]
        if len(homes) != 1:
            problems.append(
                f"{TABLE}: request {name} is in {homes or 'none'} of NAMESPACE, DATA, NOT_SENT "
                f"of scripts/check-client-layers.py: place it in exactly one (decision 0068)"
            )
    for k, v in classes.items():
        for name in sorted(v - set(table)):
            problems.append(f"scripts/check-client-layers.py: {k} names {name}, not a request")
    allowed = {"namespace": NAMESPACE, "data": DATA}
    for rel, layer, built, sends in survey(root):
        path = os.path.join(CLIENT, rel)
        if layer is None:
            for line in sends:
                problems.append(
                    f"{path}:{line}: sends a request outside namespace/ and data/: call the "
                    f"layer that owns it (client.ns() or client.data())"
                )
            for name, line in sorted(built.items(), key=lambda x: x[1]):
                if name in table:
                    problems.append(
                        f"{path}:{line}: builds request {name} outside namespace/ and data/"
                    )
            continue
        for name, line in sorted(built.items(), key=lambda x: x[1]):
            if name in NOT_SENT:
                problems.append(f"{path}:{line}: builds {name}, a request the client never sends")
            elif name in table and name not in allowed[layer]:
                other = "data" if layer == "namespace" else "namespace"
                problems.append(
                    f"{path}:{line}: {layer}/ builds {name}, a request of the {other} layer: "
                    f"call {other}/ for it"
                )
    return problems


def print_map(root):
    table = set(table_requests(root))
    for rel, layer, built, sends in survey(root):
        names = " ".join(sorted(n for n in built if n in table)) or "-"
        print(f"{rel}\t{layer or 'facade'}\tsends:{len(sends)}\t{names}")


FIXTURE_TABLE = """macro_rules! request_table {
    ($m:ident) => {
        $m! {
            Create "create" { path } -> Inode, store, 0, id: -, bulk: [];
            Stat "stat" { path } -> Inode, store, 0, id: -, bulk: [];
            Write "write" {} -> (), store, 0, id: -, bulk: [];
            Replicate "replicate" {} -> (), store, 0, id: -, bulk: [];
        }
    };
}
"""

FIXTURE = {
    "lib.rs": "//! façade\n// self.rpc().call(d, req::Write {}) in a comment\nfn f() { let s = \"req::Stat\"; }\n",
    "namespace/mod.rs": "//! ns\nasync fn g() { self.meta(p, req::Create { path }).await }\n",
    "data/mod.rs": "//! data\nasync fn h() { self.rpc()\n    .try_call(d, req::Write {}).await }\n",
}

FAULTS = {
    "a send outside the layers": ("held.rs", "fn x() { self.rpc().call(d, r) }\n", "sends a request outside"),
    "a layer's sender outside": ("file.rs", "fn x() { self.meta::<R>(p, r) }\n", "sends a request outside"),
    "a request built outside": ("file.rs", "fn x() { let r = req::Stat { path }; }\n", "builds request Stat outside"),
    "a data request in namespace/": ("namespace/x.rs", "fn x() { req::Write {} }\n", "a request of the data layer"),
    "a namespace request in data/": ("data/x.rs", "fn x() { Request::Stat(s) }\n", "a request of the namespace layer"),
    "a peers' request": ("data/y.rs", "fn x() { req::Replicate {} }\n", "never sends"),
}


def self_test():
    global NAMESPACE, DATA, NOT_SENT
    saved = (NAMESPACE, DATA, NOT_SENT)
    NAMESPACE, DATA, NOT_SENT = {"Create", "Stat"}, {"Write"}, {"Replicate"}
    try:
        for fault, (rel, text, want) in [(None, (None, None, None))] + list(FAULTS.items()):
            with tempfile.TemporaryDirectory() as d:
                os.makedirs(os.path.dirname(os.path.join(d, TABLE)))
                with open(os.path.join(d, TABLE), "w") as f:
                    f.write(FIXTURE_TABLE)
                files = dict(FIXTURE)
                if rel:
                    files[rel] = files.get(rel, "//! x\n") + text
                for name, body in files.items():
                    full = os.path.join(d, CLIENT, name)
                    os.makedirs(os.path.dirname(full), exist_ok=True)
                    with open(full, "w") as f:
                        f.write(body)
                got = check(d)
                if fault is None:
                    assert got == [], got
                else:
                    assert len(got) == 1 and want in got[0], (fault, got)
        NAMESPACE = {"Create"}
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.dirname(os.path.join(d, TABLE)))
            with open(os.path.join(d, TABLE), "w") as f:
                f.write(FIXTURE_TABLE)
            os.makedirs(os.path.join(d, CLIENT))
            got = check(d)
            assert len(got) == 1 and "request Stat is in none" in got[0], got
    finally:
        NAMESPACE, DATA, NOT_SENT = saved
    print(f"check-client-layers self-test: the clean fixture passes, {len(FAULTS) + 1} faults found")


def main():
    args = sys.argv[1:]
    if "--self-test" in args:
        self_test()
        return 0
    if "--map" in args:
        print_map(ROOT)
        return 0
    problems = check(ROOT)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check-client-layers: {len(problems)} finding(s); see decision 0068", file=sys.stderr)
        return 1
    print("check-client-layers: only namespace/ and data/ send requests, each its own")
    return 0


if __name__ == "__main__":
    sys.exit(main())
