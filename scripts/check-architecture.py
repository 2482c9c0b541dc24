#!/usr/bin/env python3
"""The map and the docs checked against the code (decision 0064).

ARCHITECTURE.md:
- every directory of crates/ has a `### <crate>` section, and every section names a crate;
- a section's `**Depends on:**` equals the eddy-* crates of its Cargo.toml [dependencies]
  (`none` when there are none), its `**Tests also link:**` the eddy-* crates of its
  [dev-dependencies] (required when there are some), and each normal dependency's
  `**Layer**` is lower than the section's own;
- every "`A` never links `B`" holds, following normal dependencies transitively;
- every path in backticks exists: a word with a `/` or a file extension, relative to the
  crate's directory inside a crate's section (else to the repository), and to the
  repository elsewhere; absolute paths,
  placeholders (a first component in capitals, `<...>`, `{...}`, `*`, `...`) and target/ are
  not paths of the repository and are skipped;
- every .rs file under crates/*/src opens with `//!` (its purpose).

docs/decisions/*.md: the line after the title is the header
`Status: accepted|amended|superseded · Date: YYYY-MM-DD[ · Amended by: [NNNN](file), ...]
[ · Amends: ...][ · Superseded by: ...][ · Supersedes: ...]`; each link names an existing
decision, and each "Amended by"/"Superseded by" is answered by an "Amends"/"Supersedes" in
the other decision (and the other way round), with the status to match.

docs/guide/: every chapter SUMMARY.md lists exists; every relative link in the guide, the
README, ARCHITECTURE.md and docs/*.md points to an existing file (anchors not checked).

Usage: scripts/check-architecture.py            check the repository, exit 1 on a finding
       scripts/check-architecture.py --self-test check the check on built-in fixtures
Python 3.11 standard library only; needs no build.
"""

import glob
import os
import re
import shutil
import sys
import tempfile
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SECTION = re.compile(r"^### (\S+)\s*$", re.M)
LAYER = re.compile(r"\*\*Layer\*\*\s+(\d+)")
DEPENDS = re.compile(r"\*\*Depends on:\*\*\s*(.*?)\.?\s*(?:\n\s*\n|\n- |\Z)", re.S)
TESTS_LINK = re.compile(r"\*\*Tests also link:\*\*\s*(.*?)\.?\s*(?:\n\s*\n|\n- |\Z)", re.S)
NEVER = re.compile(r"`(eddy-[\w-]+)` never links `(eddy-[\w-]+)`")
CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
EXT = re.compile(r"\.(rs|md|toml|py|sh|txt|lua|c|sql|json|yaml|yml|png|svg)$")
LINK = re.compile(r"\]\(([^)\s]+)\)")

STATUSES = ("accepted", "amended", "superseded")
PAIRS = {"Amended by": "Amends", "Superseded by": "Supersedes"}
PAIRS.update({v: k for k, v in list(PAIRS.items())})
DECISION_LINK = re.compile(r"\[(\d{4})\]\(([^)]+)\)")


def blank_fences(text):
    """The text with its fenced code blocks blanked out, offsets and lines kept."""
    return FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def crate_deps(root, crate):
    """The eddy-* crates of a crate's [dependencies] and [dev-dependencies]."""
    with open(os.path.join(root, "crates", crate, "Cargo.toml"), "rb") as f:
        manifest = tomllib.load(f)
    normal = {d for d in manifest.get("dependencies", {}) if d.startswith("eddy-")}
    dev = {d for d in manifest.get("dev-dependencies", {}) if d.startswith("eddy-")}
    return normal, dev


def names(text):
    text = text.strip()
    if text.lower().startswith("none"):
        return set()
    return {n.strip(" .`") for n in re.split(r"[,\s]+", text) if n.strip(" .`")}


def looks_like_path(word):
    if " " in word or "::" in word or word.startswith(("-", "/", "~", "$", "http")):
        return False
    if any(c in word for c in "<>{}*()=|\"'") or "..." in word or "…" in word:
        return False
    if not ("/" in word or EXT.search(word)):
        return False
    first = word.split("/")[0]
    if first == "target" or (first.isupper() and len(first) > 1) or first.rstrip("_").isupper():
        return False
    return re.fullmatch(r"[\w.\-/]+", word) is not None


def check_architecture(root):
    errors = []
    path = os.path.join(root, "ARCHITECTURE.md")
    text = open(path, encoding="utf-8").read()
    crates = sorted(
        d for d in os.listdir(os.path.join(root, "crates"))
        if os.path.isfile(os.path.join(root, "crates", d, "Cargo.toml"))
    )
    marks = list(SECTION.finditer(text))
    sections = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        # A section ends at the next heading of any level.
        nxt = re.search(r"^#{1,3} ", text[m.end():end], re.M)
        body_end = m.end() + nxt.start() if nxt else end
        sections[m.group(1)] = (m.start(), text[m.end():body_end])
    for crate in crates:
        if crate not in sections:
            errors.append(f"ARCHITECTURE.md: crate {crate} has no `### {crate}` section")
    layers, normal_of = {}, {}
    for name, (_, body) in sections.items():
        if name not in crates:
            errors.append(f"ARCHITECTURE.md: section `### {name}` names no directory of crates/")
            continue
        normal, dev = crate_deps(root, name)
        normal_of[name] = normal
        layer = LAYER.search(body)
        if layer:
            layers[name] = int(layer.group(1))
        else:
            errors.append(f"ARCHITECTURE.md: section {name} has no **Layer**")
        dep = DEPENDS.search(body)
        if not dep:
            errors.append(f"ARCHITECTURE.md: section {name} has no **Depends on:**")
        elif names(dep.group(1)) != normal:
            errors.append(
                f"ARCHITECTURE.md: {name} **Depends on:** {sorted(names(dep.group(1)))}, but "
                f"crates/{name}/Cargo.toml [dependencies] has {sorted(normal)}"
            )
        tests = TESTS_LINK.search(body)
        listed = names(tests.group(1)) if tests else set()
        if listed != dev:
            errors.append(
                f"ARCHITECTURE.md: {name} **Tests also link:** {sorted(listed)}, but "
                f"crates/{name}/Cargo.toml [dev-dependencies] has {sorted(dev)}"
            )
    for name, normal in normal_of.items():
        for d in sorted(normal):
            if name in layers and d in layers and layers[d] >= layers[name]:
                errors.append(
                    f"ARCHITECTURE.md: {name} (layer {layers[name]}) depends on {d} "
                    f"(layer {layers[d]}): a crate depends only on lower layers"
                )
    for a, b in NEVER.findall(text):
        if a not in crates or b not in crates:
            errors.append(f"ARCHITECTURE.md: `{a}` never links `{b}`: no such crate")
            continue
        seen, todo = set(), [a]
        while todo:
            c = todo.pop()
            for d in crate_deps(root, c)[0]:
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        if b in seen:
            errors.append(f"ARCHITECTURE.md says `{a}` never links `{b}`, but it does")
    # Paths named in backticks, outside code blocks.
    prose = blank_fences(text)
    starts = sorted((start, name) for name, (start, _) in sections.items())
    other = [m.start() for m in re.finditer(r"^#{1,2} ", prose, re.M)]
    for m in CODE.finditer(prose):
        word = m.group(1).strip()
        if not looks_like_path(word):
            continue
        base = root
        owner = [n for s, n in starts if s < m.start()]
        if owner:
            sec_start = max(s for s, n in starts if s < m.start())
            if not any(sec_start < o < m.start() for o in other) and owner[-1] in crates:
                base = os.path.join(root, "crates", owner[-1])
        if not os.path.exists(os.path.join(base, word)) and not os.path.exists(os.path.join(root, word)):
            line = prose.count("\n", 0, m.start()) + 1
            where = os.path.relpath(base, root)
            errors.append(
                f"ARCHITECTURE.md:{line}: `{word}` does not exist"
                + ("" if where == "." else f" (relative to {where}/)")
            )
    for crate in crates:
        for f in sorted(glob.glob(os.path.join(root, "crates", crate, "src", "**", "*.rs"), recursive=True)):
            with open(f, encoding="utf-8") as fh:
                first = fh.readline()
            if not first.startswith("//!"):
                errors.append(f"{os.path.relpath(f, root)}: does not open with `//!` (its purpose)")
    return errors


def check_decisions(root):
    errors = []
    ddir = os.path.join(root, "docs", "decisions")
    files = sorted(f for f in os.listdir(ddir) if re.match(r"\d{4}-.*\.md$", f))
    headers = {}
    for f in files:
        lines = open(os.path.join(ddir, f), encoding="utf-8").read().split("\n")
        header = next((l for l in lines[1:4] if l.startswith("Status:")), None)
        if header is None:
            errors.append(
                f"docs/decisions/{f}: no header line `Status: accepted · Date: YYYY-MM-DD` "
                "after its title"
            )
            continue
        fields = {}
        for part in header.split(" · "):
            key, _, value = part.partition(":")
            fields[key.strip()] = value.strip()
        status = fields.get("Status", "")
        if status not in STATUSES:
            errors.append(f"docs/decisions/{f}: status `{status}` is not one of {', '.join(STATUSES)}")
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", fields.get("Date", "")):
            errors.append(f"docs/decisions/{f}: no `Date: YYYY-MM-DD` in its header")
        links = {}
        for key, value in fields.items():
            if key in ("Status", "Date"):
                continue
            if key not in PAIRS:
                errors.append(f"docs/decisions/{f}: unknown header field `{key}`")
                continue
            found = DECISION_LINK.findall(value)
            if not found:
                errors.append(f"docs/decisions/{f}: `{key}:` links no decision")
            for num, target in found:
                if not os.path.isfile(os.path.join(ddir, target)) or not target.startswith(num):
                    errors.append(f"docs/decisions/{f}: `{key}:` links {target}, no such decision")
                links.setdefault(key, set()).add(target)
        headers[f] = (status, links)
    for f, (status, links) in headers.items():
        if "Superseded by" in links and status != "superseded":
            errors.append(f"docs/decisions/{f}: superseded by another, but its status is {status}")
        elif "Amended by" in links and "Superseded by" not in links and status != "amended":
            errors.append(f"docs/decisions/{f}: amended by another, but its status is {status}")
        elif status in ("amended", "superseded") and not links.get(
            "Amended by" if status == "amended" else "Superseded by"
        ):
            errors.append(f"docs/decisions/{f}: status {status}, but it names no decision that did it")
        for key, targets in links.items():
            for t in targets:
                if t in headers and f not in headers[t][1].get(PAIRS[key], set()):
                    errors.append(
                        f"docs/decisions/{f}: `{key}: {t}`, but {t} has no `{PAIRS[key]}:` link back"
                    )
    return errors


def check_guide(root):
    errors = []
    guide = os.path.join(root, "docs", "guide")
    summary = os.path.join(guide, "SUMMARY.md")
    if not os.path.isfile(summary):
        return ["docs/guide/SUMMARY.md: missing"]
    for m in LINK.finditer(FENCE.sub("", open(summary, encoding="utf-8").read())):
        target = m.group(1)
        if target and not os.path.isfile(os.path.join(guide, target)):
            errors.append(f"docs/guide/SUMMARY.md lists {target}, which does not exist")
    docs = [os.path.join(root, "README.md"), os.path.join(root, "ARCHITECTURE.md")]
    docs += glob.glob(os.path.join(root, "docs", "*.md"))
    docs += glob.glob(os.path.join(guide, "**", "*.md"), recursive=True)
    docs += glob.glob(os.path.join(root, "docs", "decisions", "*.md"))
    for doc in sorted(docs):
        text = blank_fences(open(doc, encoding="utf-8").read())
        for m in LINK.finditer(text):
            target = m.group(1).split("#")[0]
            if not target or re.match(r"[a-z]+:", target):
                continue
            if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(doc), target))):
                line = text.count("\n", 0, m.start()) + 1
                errors.append(f"{os.path.relpath(doc, root)}:{line}: link to {m.group(1)}: no such file")
    return errors


def check(root):
    return check_architecture(root) + check_decisions(root) + check_guide(root)


# ---------------------------------------------------------------------------------------
# Self-test: a small repository that passes, then one fault at a time that must be found.

GOOD = {
    "crates/eddy-a/Cargo.toml": '[package]\nname = "eddy-a"\n',
    "crates/eddy-a/src/lib.rs": "//! a\n",
    "crates/eddy-b/Cargo.toml": '[package]\nname = "eddy-b"\n[dependencies]\neddy-a.workspace = true\n'
    'serde = "1"\n[dev-dependencies]\neddy-c = { path = "../eddy-c" }\n',
    "crates/eddy-b/src/lib.rs": "//! b\n",
    "crates/eddy-b/src/x.rs": "//! x\nfn f() {}\n",
    "crates/eddy-c/Cargo.toml": '[package]\nname = "eddy-c"\n[dependencies]\neddy-b.workspace = true\n',
    "crates/eddy-c/src/main.rs": "//! c\n",
    "ARCHITECTURE.md": "# Map\n\n## Crates\n\n### eddy-a\n\n- **Layer** 0. **Depends on:** none.\n"
    "- **Entry points:** `src/lib.rs`.\n\n### eddy-b\n\n- **Layer** 1. **Depends on:** eddy-a.\n"
    "- **Tests also link:** eddy-c.\n- **Entry points:** `src/x.rs`, `ROOT/chunks/<hh>`.\n\n"
    "### eddy-c\n\n- **Layer** 2. **Depends on:** eddy-b.\n\n## Invariants\n\n"
    "- `eddy-a` never links `eddy-b`. See `crates/eddy-b/src/x.rs` and `target/book`.\n"
    "```\n`no/such/file.rs` in a code block is not checked\n```\n",
    "docs/decisions/0001-one.md": "# 0001 One\n\nStatus: amended · Date: 2026-01-01 · "
    "Amended by: [0002](0002-two.md)\n\ntext\n",
    "docs/decisions/0002-two.md": "# 0002 Two\n\nStatus: accepted · Date: 2026-01-02 · "
    "Amends: [0001](0001-one.md)\n\nSee [one](0001-one.md).\n",
    "docs/guide/SUMMARY.md": "# Summary\n\n- [Start](start.md)\n",
    "docs/guide/start.md": "# Start\n\n[the map](../../ARCHITECTURE.md), [web](https://x.org)\n",
    "README.md": "# R\n\n[guide](docs/guide/SUMMARY.md#top)\n",
}

FAULTS = [
    ("a crate without a section", "crates/eddy-d/Cargo.toml", None, '[package]\nname = "eddy-d"\n',
     "has no `### eddy-d` section"),
    ("a section without a crate", "ARCHITECTURE.md", "### eddy-c", "### eddy-z\n\n### eddy-c",
     "names no directory"),
    ("a dependency missing from the map", "crates/eddy-c/Cargo.toml", "eddy-b.workspace = true",
     "eddy-b.workspace = true\neddy-a.workspace = true", "crates/eddy-c/Cargo.toml [dependencies]"),
    ("a dependency the code does not have", "ARCHITECTURE.md", "**Depends on:** eddy-b.",
     "**Depends on:** eddy-b, eddy-a.", "[dependencies] has ['eddy-b']"),
    ("a dev-dependency missing from the map", "ARCHITECTURE.md", "- **Tests also link:** eddy-c.\n",
     "", "[dev-dependencies] has ['eddy-c']"),
    ("an upward dependency", "ARCHITECTURE.md", "**Layer** 2", "**Layer** 1",
     "a crate depends only on lower layers"),
    ("a false never-links", "ARCHITECTURE.md", "`eddy-a` never links `eddy-b`",
     "`eddy-c` never links `eddy-a`", "never links `eddy-a`, but it does"),
    ("a missing path in a crate section", "ARCHITECTURE.md", "`src/x.rs`", "`src/y.rs`",
     "`src/y.rs` does not exist (relative to crates/eddy-b/)"),
    ("a missing repository path", "ARCHITECTURE.md", "`crates/eddy-b/src/x.rs`",
     "`crates/eddy-b/src/gone.rs`", "`crates/eddy-b/src/gone.rs` does not exist"),
    ("a source file without its purpose", "crates/eddy-b/src/x.rs", "//! x\n", "",
     "does not open with `//!`"),
    ("a decision without a header", "docs/decisions/0002-two.md",
     "Status: accepted · Date: 2026-01-02 · Amends: [0001](0001-one.md)\n", "", "no header line"),
    ("a decision with a bad date", "docs/decisions/0002-two.md", "2026-01-02", "Jan 2",
     "no `Date: YYYY-MM-DD`"),
    ("a link to a missing decision", "docs/decisions/0001-one.md", "[0002](0002-two.md)",
     "[0003](0003-three.md)", "links 0003-three.md, no such decision"),
    ("a one-sided amendment", "docs/decisions/0002-two.md", " · Amends: [0001](0001-one.md)", "",
     "has no `Amends:` link back"),
    ("a status that does not match", "docs/decisions/0001-one.md", "Status: amended",
     "Status: accepted", "amended by another, but its status is accepted"),
    ("a chapter missing from the guide", "docs/guide/SUMMARY.md", "(start.md)",
     "(start.md)\n- [Gone](gone.md)", "lists gone.md, which does not exist"),
    ("a broken relative link", "docs/guide/start.md", "../../ARCHITECTURE.md", "../ARCHITECTURE.md",
     "link to ../ARCHITECTURE.md: no such file"),
]


def write_tree(base, files):
    for rel, content in files.items():
        path = os.path.join(base, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(content)


def self_test():
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        good = os.path.join(tmp, "good")
        write_tree(good, GOOD)
        errors = check(good)
        if errors:
            print("self-test: the clean fixture fails:\n  " + "\n  ".join(errors))
            failures += 1
        for what, rel, old, new, expect in FAULTS:
            case = os.path.join(tmp, "case")
            shutil.copytree(good, case)
            path = os.path.join(case, rel)
            if old is None:
                write_tree(case, {rel: new})
            else:
                text = open(path, encoding="utf-8").read()
                assert old in text, f"self-test fixture for {what}: {old!r} not in {rel}"
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text.replace(old, new, 1))
            errors = check(case)
            if not any(expect in e for e in errors):
                print(f"self-test: {what} was not found (wanted {expect!r}; got {errors})")
                failures += 1
            shutil.rmtree(case)
    if failures:
        sys.exit(1)
    print(f"check-architecture self-test: the clean fixture passes, {len(FAULTS)} faults found")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    if sys.argv[1:]:
        sys.exit(__doc__)
    errors = check(ROOT)
    for e in errors:
        print(e)
    if errors:
        print(f"check-architecture: {len(errors)} finding(s); see ARCHITECTURE.md § Checked")
        sys.exit(1)
    print("check-architecture: ARCHITECTURE.md, the decisions and the guide agree with the tree")


if __name__ == "__main__":
    main()
