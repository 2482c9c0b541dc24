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


GROUPS = [
    ("Errors and version", ["eddy_last_error", "eddy_api_version"]),
    ("Connections", ["eddy_connect", "eddy_disconnect"]),
    ("Files", ["eddy_open", "eddy_close", "eddy_pread", "eddy_pwrite", "eddy_fsync",
               "eddy_ftruncate", "eddy_fstat", "eddy_fadvise"]),
    ("The namespace", ["eddy_stat", "eddy_mkdir", "eddy_unlink", "eddy_rmdir", "eddy_rename",
                       "eddy_truncate", "eddy_readdir"]),
    ("Extended attributes", ["eddy_getxattr", "eddy_setxattr", "eddy_listxattr",
                             "eddy_removexattr"]),
    ("Locks", ["eddy_lock"]),
    ("Batched asynchronous I/O", ["eddy_batch_submit", "eddy_batch_wait", "eddy_batch_poll",
                                  "eddy_batch_free"]),
    ("Transfer and statistics", ["eddy_transfer", "eddy_stats_json"]),
]


def declarations(lines):
    """(comment lines, declaration) of every commented declaration of the header."""
    items, comment, i = [], [], 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("//"):
            comment.append(line[3:] if line.startswith("// ") else line[2:])
            i += 1
            continue
        if line.strip() == "" or not comment:
            i += 1
            continue
        decl = [line]
        if line.startswith("struct"):
            while decl[-1].strip() != "};":
                i += 1
                decl.append(lines[i])
        elif not line.startswith("#define"):
            while not decl[-1].rstrip().endswith(";"):
                i += 1
                decl.append(lines[i])
        items.append((comment, "\n".join(decl)))
        comment = []
        i += 1
    return items


def paragraphs(comment):
    """The comment's lines joined into paragraphs."""
    out, cur = [], []
    for line in comment:
        if line.strip() == "":
            if cur:
                out.append(" ".join(cur))
                cur = []
        else:
            cur.append(line.strip())
    if cur:
        out.append(" ".join(cur))
    return "\n\n".join(p.replace("# Safety", "**Safety:**") for p in out)


def reference():
    items = declarations(HEADER.read_text().splitlines())
    out = []

    def emit(comment, decl):
        out.append("```c\n" + decl.strip() + "\n```\n")
        out.append(paragraphs(comment) + "\n")

    out.append("## Constants\n")
    for c, d in items:
        if d.startswith("#define"):
            emit(c, d)
    out.append("## Types\n")
    for c, d in items:
        if d.startswith(("typedef", "struct")):
            emit(c, d)
    funcs = {}
    for c, d in items:
        if not d.startswith(("#", "typedef", "struct")):
            funcs[re.search(r"\b(eddy_\w+)\(", d).group(1)] = (c, d)
    listed = {n for _, names in GROUPS for n in names}
    if set(funcs) != listed:
        sys.exit(f"scripts/c-reference.py: GROUPS does not list {sorted(set(funcs) ^ listed)}")
    for title, names in GROUPS:
        out.append(f"## {title}\n")
        for n in names:
            emit(*funcs[n])
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
