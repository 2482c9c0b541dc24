//! Several backends under one linked prefix, and the rules that place a new file's data on
//! one of them at its first write-back (decision 0073). A link's own `backend` directory is
//! its default backend; `[[backends]]` tables add more under the same prefix (and may name
//! the default one, giving it a name, a kind and a quota). `[[placement_rules]]` pick a
//! backend by path pattern, size, owner, group or I/O mode (one writer or several); a file's (or its directory's, copied at
//! creation) `user.eddy.backend` attribute picks one by name. This module holds the types,
//! their checks and the choice itself (`Placer`), a pure function of what the metadata
//! owner knows of a file; no I/O.

use crate::{ConfigError, Link};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The extended attribute naming a file's backend (decision 0073): set by a user on a file
/// (before its first write-back) or a directory (copied onto the entries later made in it),
/// and recorded by Eddy on a file once it is placed (imported from a backend, or written
/// back to one).
pub const BACKEND_XATTR: &str = "user.eddy.backend";

/// A named backend directory under a linked prefix (`[[backends]]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendDecl {
    /// Its name, used by rules, `user.eddy.backend`, `eddy status` and the metrics: letters,
    /// digits, `.`, `_` and `-`.
    pub name: String,
    /// The prefix of the `[[links]]` entry it serves.
    pub prefix: String,
    /// Absolute directory every daemon sees at this path; the link's own `backend` to
    /// name the default one.
    pub path: PathBuf,
    /// What it is, for people (`ext4`, `lustre`, `gluster`, `archive`...). Default empty.
    #[serde(default)]
    pub kind: String,
    /// Quota: a new file is not placed there when the backend's file system would then use
    /// more than this many bytes (its whole use, as `df` counts it). 0: none. Default 0.
    #[serde(default)]
    pub capacity_bytes: u64,
    /// Nothing is ever written there: its files are imported and read; a changed one stays
    /// dirty in Eddy (stage-out fails with EROFS naming the backend). Default false.
    #[serde(default)]
    pub read_only: bool,
}

/// A placement rule (`[[placement_rules]]`): the backend a new file's data goes to when
/// every condition given holds (at least one is). First matching rule wins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementRule {
    /// The backend's name.
    pub backend: String,
    /// A glob of the file's namespace path (`*` stays within a name, `**` crosses
    /// directories, `?`, `[abc]`, `{a,b}`), e.g. `/out/**/*.h5`.
    #[serde(default)]
    pub path: Option<String>,
    /// The file's size at write-back is at least this many bytes.
    #[serde(default)]
    pub min_size: Option<u64>,
    /// The file's size at write-back is at most this many bytes.
    #[serde(default)]
    pub max_size: Option<u64>,
    /// The file's owner.
    #[serde(default)]
    pub uid: Option<u32>,
    /// The file's group.
    #[serde(default)]
    pub gid: Option<u32>,
    /// How the file was written until its first write-back: `shared` (N-1: by more than one
    /// client — mounts, or processes through the preload library — one file for many
    /// writers) or `per-process` (N-N: by one client).
    #[serde(default)]
    pub io_mode: Option<IoMode>,
}

/// The I/O mode a placement rule may ask for (`io_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IoMode {
    /// N-1: written by more than one client.
    Shared,
    /// N-N: written by one client.
    PerProcess,
}

/// One backend of a link, as the daemons use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    pub name: String,
    pub kind: String,
    pub path: PathBuf,
    pub capacity_bytes: u64,
    pub read_only: bool,
}

impl Store {
    /// The path in this backend of a normalised namespace path under `prefix`.
    pub fn path_of(&self, prefix: &str, norm: &str) -> PathBuf {
        Link {
            prefix: prefix.to_string(),
            backend: self.path.clone(),
        }
        .backend_path(norm)
    }
}

/// What the metadata owner knows of a file when it places it.
#[derive(Debug, Clone, Copy)]
pub struct FileFacts<'a> {
    pub path: &'a str,
    pub size: u64,
    pub uid: u32,
    pub gid: u32,
    /// Its `user.eddy.backend`, if it has one.
    pub asked: Option<&'a str>,
    /// Whether more than one client wrote it (its I/O mode), when that is known: on the
    /// metadata owner at its first write-back.
    pub shared: Option<bool>,
    /// The backend it is in, if any. A rule by `io_mode` holds for a file whose I/O mode
    /// is not known (at a rename or a hard link) when the file is in the rule's backend.
    pub current: Option<&'a str>,
}

/// Why a file got its backend (for logs and errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Because {
    Attribute,
    Rule(usize),
    Default,
}

/// The backends of every link and the compiled rules: which backend a file goes to.
#[derive(Debug, Clone)]
pub struct Placer {
    /// Per link (the config's order): its prefix and its backends, the default first, then
    /// the declared ones in their order (the order imports look in).
    links: Vec<(String, Vec<Store>)>,
    rules: Vec<(PlacementRule, Option<globset::GlobMatcher>)>,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn compile(pattern: &str) -> Result<globset::GlobMatcher, ConfigError> {
    if !pattern.starts_with('/') {
        return Err(ConfigError::Invalid(format!(
            "placement rule path {pattern:?} must be a glob of absolute namespace paths, such as /out/**/*.h5"
        )));
    }
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| {
            ConfigError::Invalid(format!(
                "placement rule path {pattern:?} is not a glob: {e}"
            ))
        })
}

fn nested(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

impl Placer {
    /// Each link with its own directory only, no rules (what a deployment without
    /// `[[backends]]` has).
    pub fn links_only(links: &[Link]) -> Placer {
        Placer {
            links: links
                .iter()
                .map(|l| {
                    (
                        l.prefix.clone(),
                        vec![Store {
                            name: l.prefix.clone(),
                            kind: String::new(),
                            path: l.backend.clone(),
                            capacity_bytes: 0,
                            read_only: false,
                        }],
                    )
                })
                .collect(),
            rules: Vec::new(),
        }
    }

    /// Checks the backends and rules against the links and compiles them.
    pub fn new(
        links: &[Link],
        decls: &[BackendDecl],
        rules: &[PlacementRule],
    ) -> Result<Placer, ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        let mut out = Placer::links_only(links).links;
        for (i, d) in decls.iter().enumerate() {
            if !valid_name(&d.name) {
                return bad(format!(
                    "backend name {:?} must be 1 to 64 letters, digits, '.', '_' or '-'",
                    d.name
                ));
            }
            if decls[..i].iter().any(|o| o.name == d.name) {
                return bad(format!("backend {} is declared twice", d.name));
            }
            let Some((prefix, stores)) = out.iter_mut().find(|(p, _)| *p == d.prefix) else {
                return bad(format!(
                    "backend {}: no [[links]] entry has the prefix {:?} (a backend serves a linked prefix)",
                    d.name, d.prefix
                ));
            };
            if !d.path.is_absolute()
                || d.path
                    .components()
                    .any(|c| c == std::path::Component::ParentDir)
            {
                return bad(format!(
                    "backend {}: path {} must be an absolute directory without `..`",
                    d.name,
                    d.path.display()
                ));
            }
            let store = Store {
                name: d.name.clone(),
                kind: d.kind.clone(),
                path: d.path.clone(),
                capacity_bytes: d.capacity_bytes,
                read_only: d.read_only,
            };
            if d.path == stores[0].path && stores[0].name == *prefix {
                // Names the link's own backend, the default of its prefix.
                if d.read_only {
                    return bad(format!(
                        "backend {} is the default backend of {prefix} (the link's own directory), which must not be read-only: new files go there when no rule says otherwise",
                        d.name
                    ));
                }
                stores[0] = store;
            } else {
                stores.push(store);
            }
        }
        // No declared backend directory may lie within another backend's: a file would be
        // in two backends. (Links' own directories are left as they always were.)
        let all: Vec<(&str, &Path, bool)> = out
            .iter()
            .flat_map(|(_, s)| {
                s.iter().enumerate().map(|(i, s)| {
                    let declared = i > 0 || decls.iter().any(|d| d.name == s.name);
                    (s.name.as_str(), s.path.as_path(), declared)
                })
            })
            .collect();
        for (i, (name, path, declared)) in all.iter().enumerate() {
            for (other, opath, odeclared) in &all[..i] {
                if (*declared || *odeclared) && nested(path, opath) {
                    return bad(format!(
                        "backends {other} ({}) and {name} ({}) overlap: backend directories must be disjoint",
                        opath.display(),
                        path.display()
                    ));
                }
            }
        }
        let mut compiled = Vec::new();
        for r in rules {
            let Some(store) = out
                .iter()
                .flat_map(|(_, s)| s.iter())
                .find(|s| s.name == r.backend)
            else {
                return bad(format!(
                    "placement rule: backend {:?} is not declared (known: {})",
                    r.backend,
                    all.iter()
                        .map(|(n, _, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            };
            if store.read_only {
                return bad(format!(
                    "placement rule: backend {} is read-only; nothing can be placed there",
                    r.backend
                ));
            }
            if r.path.is_none()
                && r.min_size.is_none()
                && r.max_size.is_none()
                && r.uid.is_none()
                && r.gid.is_none()
                && r.io_mode.is_none()
            {
                return bad(format!(
                    "placement rule for {}: give at least one of path, min_size, max_size, uid, gid, io_mode",
                    r.backend
                ));
            }
            if let (Some(lo), Some(hi)) = (r.min_size, r.max_size) {
                if lo > hi {
                    return bad(format!(
                        "placement rule for {}: min_size {lo} is above max_size {hi}",
                        r.backend
                    ));
                }
            }
            let glob = r.path.as_deref().map(compile).transpose()?;
            compiled.push((r.clone(), glob));
        }
        Ok(Placer {
            links: out,
            rules: compiled,
        })
    }

    /// The backends of the link with this prefix, the default first.
    pub fn stores_of(&self, prefix: &str) -> &[Store] {
        self.links
            .iter()
            .find(|(p, _)| p == prefix)
            .map_or(&[], |(_, s)| s.as_slice())
    }

    /// Every link's prefix with its backends.
    pub fn links(&self) -> impl Iterator<Item = (&str, &[Store])> {
        self.links.iter().map(|(p, s)| (p.as_str(), s.as_slice()))
    }

    /// Whether a rule asks for an I/O mode (the daemons then count each file's writers).
    pub fn uses_io_mode(&self) -> bool {
        self.rules.iter().any(|(r, _)| r.io_mode.is_some())
    }

    /// Whether the link with this prefix has more than one backend.
    pub fn is_multi(&self, prefix: &str) -> bool {
        self.stores_of(prefix).len() > 1
    }

    /// The backend of the link `prefix` a file goes to, by index in `stores_of(prefix)`:
    /// its attribute when it names one of them, else the first rule that matches, else the
    /// default (0).
    pub fn choose(&self, prefix: &str, f: &FileFacts<'_>) -> (usize, Because) {
        let stores = self.stores_of(prefix);
        let index = |name: &str| stores.iter().position(|s| s.name == name);
        if let Some(i) = f.asked.and_then(index) {
            return (i, Because::Attribute);
        }
        for (n, (r, glob)) in self.rules.iter().enumerate() {
            let Some(i) = index(&r.backend) else {
                continue;
            };
            let holds = glob.as_ref().is_none_or(|g| g.is_match(f.path))
                && r.min_size.is_none_or(|m| f.size >= m)
                && r.max_size.is_none_or(|m| f.size <= m)
                && r.uid.is_none_or(|u| f.uid == u)
                && r.gid.is_none_or(|g| f.gid == g)
                && match (r.io_mode, f.shared) {
                    (None, _) => true,
                    (Some(m), Some(shared)) => shared == (m == IoMode::Shared),
                    (Some(_), None) => f.current == Some(r.backend.as_str()),
                };
            if holds {
                return (i, Because::Rule(n));
            }
        }
        (0, Because::Default)
    }
}
