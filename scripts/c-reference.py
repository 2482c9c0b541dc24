#!/usr/bin/env python3
"""The guide's C reference (docs/guide/c-reference.md), made from the comments of libeddy's
header (crates/eddy-c/include/eddy.h, which cbindgen makes from the crate's doc comments):
its constants, types and functions, the functions by topic. `--check` fails when the
committed chapter differs (scripts/check-c-header.sh runs it, so `make test` does); without
it the chapter is written."""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER = ROOT / "crates/eddy-c/include/eddy.h"
CHAPTER = ROOT / "docs/guide/c-reference.md"
INTRO = """# C reference

Every declaration of `eddy.h`, with its comment: this page is made from the header
(`scripts/c-reference.py`), which cbindgen makes from the library's source, and `make test`
fails when either is out of date. Every function returns 0 (or a count) or a negative errno
and leaves its message in `eddy_last_error()`; the comments say which calls block and for
how long.

"""


def reference():
    out = []
    src=HEADER.read_text().splitlines()
    items=[]; com=[]; i=0
    while i<len(src):
        l=src[i]
        if l.startswith('//'):
            com.append(l[3:] if l.startswith('// ') else l[2:]); i+=1; continue
        if l.strip()=='' or not com:
            i+=1; continue
        decl=[l]
        if l.startswith('struct'):
            while decl[-1].strip()!='};':
                i+=1; decl.append(src[i])
        elif not l.startswith('#define'):
            while not decl[-1].rstrip().endswith(';'):
                i+=1; decl.append(src[i])
        items.append((com,'\n'.join(decl))); com=[]
        i+=1
    def para(c):
        out=[];cur=[]
        for x in c:
            if x.strip()=='' :
                if cur: out.append(' '.join(cur)); cur=[]
            else: cur.append(x.strip())
        if cur: out.append(' '.join(cur))
        return '\n\n'.join(p.replace('# Safety','**Safety:**') for p in out)
    def emit(c,d):
        out.append("```c\n"+d.strip()+"\n```\n")
        out.append(para(c)+"\n")
    out.append("## Constants\n")
    for c,d in items:
        if d.startswith('#define'): emit(c,d)
    out.append("## Types\n")
    for c,d in items:
        if d.startswith('typedef') or d.startswith('struct'): emit(c,d)
    groups=[("Errors and version",["eddy_last_error","eddy_api_version"]),
     ("Connections",["eddy_connect","eddy_disconnect"]),
     ("Files",["eddy_open","eddy_close","eddy_pread","eddy_pwrite","eddy_fsync","eddy_ftruncate","eddy_fstat"]),
     ("The namespace",["eddy_stat","eddy_mkdir","eddy_unlink","eddy_rmdir","eddy_rename","eddy_truncate","eddy_readdir"]),
     ("Extended attributes",["eddy_getxattr","eddy_setxattr","eddy_listxattr","eddy_removexattr"]),
     ("Locks",["eddy_lock"]),
     ("Batched asynchronous I/O",["eddy_batch_submit","eddy_batch_wait","eddy_batch_poll","eddy_batch_free"]),
     ("Transfer and statistics",["eddy_transfer","eddy_stats_json"])]
    funcs={}
    for c,d in items:
        if d.startswith(('#','typedef','struct')): continue
        m=re.search(r'\b(eddy_\w+)\(',d); funcs[m.group(1)]=(c,d)
    seen=set()
    for title,names in groups:
        out.append(f"## {title}\n")
        for n in names:
            emit(*funcs[n]); seen.add(n)
    missing=set(funcs)-seen
    assert not missing, missing
    return INTRO + "\n".join(out).rstrip() + "\n"


def main():
    text = reference()
    if "--check" in sys.argv[1:]:
        if CHAPTER.read_text() != text:
            sys.exit(f"{CHAPTER.relative_to(ROOT)} is not what scripts/c-reference.py makes "
                     "of the header: run it and commit the chapter")
        print(f"{CHAPTER.relative_to(ROOT)} matches the header")
        return
    CHAPTER.write_text(text)
    print(f"wrote {CHAPTER.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
