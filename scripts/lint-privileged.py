#!/usr/bin/env python3
"""The privileged-path lint: path-based file calls in the code that runs as root or SlurmUser.

Root must never follow a path a job's user can change (docs/decisions/0024, 0057). This
lint lists every path-based file call in the files of scripts/privileged-files.txt (outside
`#[cfg(test)]` items and test-only files) and requires each to carry, on its own line or in
the comment lines just above its statement, an annotation

    // privileged-path: <one-line reason a job's user cannot redirect it>

e.g. "in the trusted state dir, checked by trusted_dir", "as the user, in the child after
setpriv". Work done through a directory descriptor (eddy-deploy's `DirFd`, `openat` on a
descriptor, `fstat`, `fchown`) is not a path call and needs nothing. A call a job's user can
redirect is a hole to fix, not to annotate.

Path calls matched (std, tokio, nix and libc): std::fs's File::open/create, OpenOptions,
read, read_to_string, write, create_dir(_all), remove_file, remove_dir(_all), rename,
set_permissions, metadata, symlink_metadata, read_dir, read_link, copy, hard_link,
canonicalize; DirBuilder; std::os::unix::fs's chown, lchown, symlink; Path's exists,
try_exists, is_file, is_dir, is_symlink, metadata, symlink_metadata, read_dir, canonicalize;
UnixStream::connect, UnixListener::bind, UnixDatagram::bind; libc and nix open, stat, lstat,
chown, chmod, unlink, mkdir, rename, mkfifo; openat/fstatat/... on AT_FDCWD.

Usage: scripts/lint-privileged.py            lint the repository, exit 1 on a finding
       scripts/lint-privileged.py --self-test check the lint itself on built-in fixtures
Python 3 standard library only; needs no build.
"""

import glob
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIST = os.path.join("scripts", "privileged-files.txt")
MARK = "privileged-path:"

FS_FNS = (
    "read|read_to_string|write|create_dir|create_dir_all|remove_file|remove_dir|"
    "remove_dir_all|rename|set_permissions|metadata|symlink_metadata|read_dir|read_link|"
    "copy|hard_link|canonicalize"
)
# Each pattern's match start is the call reported.
PATTERNS = [
    ("std::fs", re.compile(r"\b(?:std::|tokio::)?fs::(?:" + FS_FNS + r")\s*\(")),
    ("File::open/create", re.compile(r"\bFile::(?:open|create|create_new)\s*\(")),
    ("OpenOptions", re.compile(r"\bOpenOptions::new\s*\(")),
    ("DirBuilder", re.compile(r"\bDirBuilder::new\s*\(")),
    ("unix::fs", re.compile(r"(?<![\w.])(?:std::os::unix::fs::|unix::fs::|fs::)?(?:chown|lchown|symlink)\s*\(")),
    (
        "Path method",
        re.compile(
            r"\.(?:exists|try_exists|is_symlink|canonicalize|read_dir|read_link)\s*\(\s*\)"
        ),
    ),
    # Metadata's and FileType's own is_file/is_dir are not path calls: receivers named so
    # (see NOT_PATHS) are skipped.
    ("Path is_file/is_dir", re.compile(r"\.(?:is_file|is_dir)\s*\(\s*\)")),
    # An open File's and a DirEntry's metadata are no path calls: receivers named so (see
    # NOT_PATHS) are skipped.
    ("Path metadata", re.compile(r"\.(?:metadata|symlink_metadata)\s*\(\s*\)")),
    ("Unix socket", re.compile(r"\bUnix(?:Stream::connect|Listener::bind|Datagram::bind)\s*\(")),
    (
        "libc/nix path call",
        re.compile(
            r"\b(?:libc|nix::fcntl|nix::sys::stat|nix::unistd|stat|fcntl|unistd)::"
            r"(?:open|open64|stat|lstat|stat64|lstat64|chown|lchown|chmod|unlink|mkdir|rename|"
            r"mkfifo|rmdir|truncate|access|statvfs|statfs)\s*\("
        ),
    ),
    ("AT_FDCWD", re.compile(r"\bAT_FDCWD\b")),
]


# Receivers of `.metadata()`, `.is_file()` and `.is_dir()` that are an open file, a
# directory entry or metadata, by the names the code gives them (the expression just before
# the dot, across line breaks): not path calls.
NOT_PATHS = re.compile(
    r"(?:\b(?:file|f|entry|e|inode|data|meta|md|m|ft|st)|file_type\(\)|metadata\(\)\??)\s*$"
)
RECEIVER_CHECKED = ("Path metadata", "Path is_file/is_dir")


def strip_code(text):
    """`text` with comments, string and char literals blanked (same length, newlines kept),
    so that patterns match code only; returns (code, comments) where comments keeps only
    the comments (for annotations)."""
    out = list(text)
    comments = [" " if c != "\n" else "\n" for c in text]
    i, n = 0, len(text)

    def blank(a, b, keep_comment=False):
        for k in range(a, b):
            if text[k] != "\n":
                if keep_comment:
                    comments[k] = text[k]
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j, keep_comment=True)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j, keep_comment=True)
            i = j
        elif c == "r" and re.match(r'r(#*)"', text[i:i + 258]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            blank(i + 1, end)
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, j)
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            m = re.match(r"'(?:\\.|\\u\{[0-9a-fA-F]+\}|[^\\'])'", text[i:i + 12])
            if m:
                blank(i + 1, i + m.end() - 1)
                i += m.end()
            else:
                i += 1
        else:
            i += 1
    return "".join(out), "".join(comments)


def test_spans(code):
    """(start, end) of every item under `#[cfg(test)]` (a module, a function, ...)."""
    spans = []
    for m in re.finditer(r"#\[cfg\(test\)\]", code):
        j = m.end()
        # The item ends at its matching brace, or at `;` for `mod x;` / `use`.
        k = j
        while k < len(code) and code[k] not in "{;":
            k += 1
        if k >= len(code) or code[k] == ";":
            spans.append((m.start(), k + 1))
            continue
        depth = 0
        while k < len(code):
            if code[k] == "{":
                depth += 1
            elif code[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        spans.append((m.start(), k + 1))
    return spans


def test_module_files(path, code):
    """Files that are `#[cfg(test)] mod name;` of `path`: test code, not linted."""
    base = os.path.dirname(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    if stem not in ("lib", "main", "mod"):
        base = os.path.join(base, stem)
    out = set()
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code):
        out.add(os.path.normpath(os.path.join(base, m.group(1) + ".rs")))
        out.add(os.path.normpath(os.path.join(base, m.group(1), "mod.rs")))
    return out


def annotated(lines, comment_lines, lineno):
    """Whether the call on 1-based `lineno` carries the annotation: on its line, or in the
    comment lines above it and above the start of its statement (lines not ending a
    statement or a block)."""
    i = lineno - 1
    if MARK in comment_lines[i]:
        return True
    k = i - 1
    while k >= 0:
        code = lines[k].strip()
        if code.endswith((";", "{", "}", "},")):
            return False  # the end of another statement or block
        if MARK in comment_lines[k]:
            return True
        if code == "" and not comment_lines[k].strip():
            return False  # a blank line ends the search
        k -= 1  # a comment line, or a line of the same statement
    return False


def findings_in(path, text):
    """[(line, kind, source line)] of the unannotated path calls of one file."""
    code, comments = strip_code(text)
    spans = test_spans(code)
    lines = code.split("\n")
    comment_lines = comments.split("\n")
    src = text.split("\n")
    found = []
    seen = set()
    for kind, pat in PATTERNS:
        for m in pat.finditer(code):
            if any(a <= m.start() < b for a, b in spans):
                continue
            if kind in RECEIVER_CHECKED and NOT_PATHS.search(code[max(0, m.start() - 80):m.start()]):
                continue
            lineno = code.count("\n", 0, m.start()) + 1
            here = lines[lineno - 1].lstrip()
            # A `use` of a name, or a function of the same name, is no call.
            if here.startswith(("use ", "pub use ")) or re.search(r"\bfn\s+\w*$", code[max(0, m.start() - 40):m.start()]):
                continue
            if lineno in seen:
                continue
            seen.add(lineno)
            if not annotated(lines, comment_lines, lineno):
                found.append((lineno, kind, src[lineno - 1].strip()))
    return sorted(found)


def privileged_files(root):
    """[(path, reason)] from the list; a line without a reason is an error."""
    files, errors = {}, []
    with open(os.path.join(root, LIST)) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            if len(parts) < 2:
                errors.append(f"{LIST}:{n}: {parts[0]} has no reason")
                continue
            matched = glob.glob(os.path.join(root, parts[0]), recursive=True)
            if not matched:
                errors.append(f"{LIST}:{n}: {parts[0]} matches no file")
            for p in matched:
                files[os.path.normpath(p)] = parts[1]
    return files, errors


def lint(root):
    files, errors = privileged_files(root)
    texts = {}
    skip = set()
    for p in files:
        with open(p, encoding="utf-8") as f:
            texts[p] = f.read()
        skip |= test_module_files(p, strip_code(texts[p])[0])
    count = 0
    for p in sorted(files):
        if p in skip or os.path.basename(p) == "tests.rs" or f"{os.sep}tests{os.sep}" in p:
            continue
        for lineno, kind, line in findings_in(p, texts[p]):
            rel = os.path.relpath(p, root)
            errors.append(f"{rel}:{lineno}: {kind} without `// {MARK} <reason>`: {line}")
            count += 1
    for e in errors:
        print(e)
    if errors:
        print(
            f"\nlint-privileged: {count} path-based file call(s) in privileged code "
            f"({LIST}) are neither through a directory descriptor nor annotated. Do the work "
            f"through eddy_deploy::secure::DirFd (openat O_NOFOLLOW) or as the job's user, or, "
            f"if a job's user cannot redirect it, say why with `// {MARK} <reason>`."
        )
        return 1
    print(f"lint-privileged: {len(files)} privileged files, every path call accounted for")
    return 0


FIXTURE = r'''
use std::fs;
fn f(p: &Path, meta: std::fs::Metadata) {
    let a = std::fs::read(p); // CAUGHT
    // privileged-path: in the trusted state dir, checked by trusted_dir
    let b = std::fs::read(p);
    let c = std::fs::read_to_string(p); // privileged-path: root's own file
    if p.exists() {} // CAUGHT
    if meta.is_file() {}
    let s = "std::fs::read(p)";
    // std::fs::remove_file(p) in a comment
    let d = std::fs::OpenOptions::new() // CAUGHT
        .write(true)
        .open(p);
    // privileged-path: root's own directory
    let e = std::fs::OpenOptions::new()
        .write(true)
        .open(p);
    let x = 1;
    let g = UnixStream::connect(p); // CAUGHT
    std::os::unix::fs::chown(p, None, None); // CAUGHT
    let h = openat(AT_FDCWD, p, OFlag::O_RDONLY, Mode::empty()); // CAUGHT
    let i = nix::sys::stat::lstat(p); // CAUGHT
    let j = c
        .canonicalize(); // CAUGHT
    let k = p.metadata(); // CAUGHT
    let l = file.metadata();
    let n = lease
        .data
        .metadata();
    let o = std::fs::symlink_metadata(p)?.is_file(); // CAUGHT
    let dir = DirFd::open_at(fd, "x");
    use nix::fcntl::AT_FDCWD;
}
#[cfg(test)]
mod tests {
    fn t() { std::fs::write("/tmp/x", b"{"); let c = '{'; }
}
pub async fn symlink(p: &Path) {}
fn after() {
    fs::remove_dir_all(p); // CAUGHT
}
'''


def self_test():
    want = [n + 1 for n, line in enumerate(FIXTURE.split("\n")) if "// CAUGHT" in line]
    got = [line for line, _, _ in findings_in("fixture.rs", FIXTURE)]
    ok = got == want
    print(f"lint-privileged self-test: caught lines {got}, expected {want}")
    # And the whole lint on a tree: a listed file with an unannotated call fails it.
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "scripts"))
        os.makedirs(os.path.join(d, "src"))
        with open(os.path.join(d, LIST), "w") as f:
            f.write("src/*.rs  runs as root in the fixture\n")
        with open(os.path.join(d, "src", "a.rs"), "w") as f:
            f.write("fn f() { let _ = std::fs::read(\"/x\"); }\n")
        devnull = open(os.devnull, "w")
        saved, sys.stdout = sys.stdout, devnull
        try:
            failed = lint(d) == 1
            with open(os.path.join(d, "src", "a.rs"), "w") as f:
                f.write("// privileged-path: fixture\nfn f() { let _ = std::fs::read(\"/x\"); }\n")
            passed = lint(d) == 0
        finally:
            sys.stdout = saved
            devnull.close()
    print(f"lint-privileged self-test: unannotated tree fails: {failed}; annotated passes: {passed}")
    return 0 if ok and failed and passed else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if sys.argv[1:]:
        print(__doc__)
        sys.exit(2)
    sys.exit(lint(ROOT))
