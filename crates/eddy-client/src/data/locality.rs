//! Placement by locality (decision 0043): which placement a new entry gets (its directory's
//! `user.eddy.placement`, else the deployment's `placement`), and for a file placed `local`
//! the daemon of this client's host that becomes its home, named in its file id
//! (`eddy_placement::local_file_id`). A home that is down or full is not taken: the file is
//! hashed. What the client last learnt of its local daemons is kept `placement_view_ms`.

use crate::data::Data;
use crate::Inode;
use eddy_config::{PlacementMode, PLACEMENT_XATTR};
use eddy_proto::{req, FileKind, Xattr};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What the client knows of the daemons of its own host: whether each can take a new file.
pub(crate) struct LocalView {
    /// The deployment's daemons on this client's host (ids).
    here: Vec<u32>,
    ttl: Duration,
    /// Per daemon: when it was last asked, and whether it could take a file then.
    seen: Mutex<HashMap<u32, (Instant, bool)>>,
}

impl LocalView {
    /// The view of the daemons whose host is `host`.
    pub fn new(dep: &eddy_config::Deployment, host: &str) -> LocalView {
        LocalView {
            here: dep
                .daemons
                .iter()
                .filter(|d| d.host == host)
                .map(|d| d.id)
                .collect(),
            ttl: Duration::from_millis(dep.config.placement_view_ms),
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn fresh(&self, id: u32) -> Option<bool> {
        let seen = eddy_proto::sync::lock(&self.seen);
        seen.get(&id)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|&(_, ok)| ok)
    }

    fn note(&self, id: u32, ok: bool) {
        eddy_proto::sync::lock(&self.seen).insert(id, (Instant::now(), ok));
    }
}

/// The host a client counts as: `placement_host`, else the node name it identifies with.
pub(crate) fn this_host(config: &eddy_config::Config) -> String {
    config
        .placement_host
        .clone()
        .unwrap_or_else(|| eddy_rpc::client_id().host)
}

/// A new file or directory gets its directory's `user.eddy.backend` (decision 0073): the
/// backend of a link with several that its data (a file's), or its own new files' (a
/// directory's), go to at their first write-back.
fn inherit_backend(dir: Option<&Inode>, inode: &mut Inode) {
    use eddy_config::BACKEND_XATTR;
    let Some(x) = dir.and_then(|d| d.xattrs.iter().find(|x| x.name == BACKEND_XATTR)) else {
        return;
    };
    if !matches!(inode.kind, FileKind::File | FileKind::Dir)
        || inode.xattrs.iter().any(|y| y.name == BACKEND_XATTR)
    {
        return;
    }
    inode.xattrs.push(x.clone());
    inode.xattrs.sort_by(|a, b| a.name.cmp(&b.name));
}

/// A file renamed to `to` under a link with several backends (decision 0073) goes to the
/// backend its new name's placement picks: its new directory's `user.eddy.backend` when that
/// names a backend of the link, else the first placement rule that matches (path, size,
/// owner, group), else the default. When that is not the backend its record names, the
/// record names the new one and is marked dirty: the check before its next write-back moves
/// the data there (a copy, then the old copy removed). A file not in a backend yet keeps
/// only its new directory's attribute (it is placed at its first write-back). A file with
/// several names stays.
pub(crate) fn retarget_backend(
    config: &eddy_config::Config,
    dir: Option<&Inode>,
    to: &str,
    inode: &mut Inode,
) {
    use eddy_config::BACKEND_XATTR;
    if inode.kind != FileKind::File || inode.shared.is_some() || config.backends.is_empty() {
        return;
    }
    let Some(link) = config.link_for(to) else {
        return;
    };
    let Ok(placer) = config.placer() else {
        return;
    };
    let stores = placer.stores_of(&link.prefix);
    if stores.len() < 2 {
        return;
    }
    let asked = dir
        .and_then(|d| d.xattrs.iter().find(|x| x.name == BACKEND_XATTR))
        .and_then(|x| std::str::from_utf8(&x.value).ok())
        .filter(|n| stores.iter().any(|s| s.name == *n));
    if inode
        .tier
        .is_some_and(|t| t.backend_mtime == eddy_proto::Timespec::default())
    {
        // Not in a backend yet: placed at its first write-back, by its new directory's
        // attribute or else the rules (with its size then).
        inode.xattrs.retain(|x| x.name != BACKEND_XATTR);
        if let Some(name) = asked {
            inode.xattrs.push(Xattr {
                name: BACKEND_XATTR.to_string(),
                value: name.as_bytes().to_vec(),
            });
            inode.xattrs.sort_by(|a, b| a.name.cmp(&b.name));
        }
        return;
    }
    let current = inode
        .xattrs
        .iter()
        .find(|x| x.name == BACKEND_XATTR)
        .and_then(|x| std::str::from_utf8(&x.value).ok());
    let facts = eddy_config::FileFacts {
        path: to,
        size: inode.size,
        uid: inode.uid,
        gid: inode.gid,
        asked,
        // Its writers are counted on its metadata owner until its first write-back only: a
        // rule by I/O mode holds for it here if it is in that rule's backend.
        shared: None,
        current,
    };
    let want = stores[placer.choose(&link.prefix, &facts).0]
        .name
        .as_bytes();
    match inode.xattrs.iter_mut().find(|x| x.name == BACKEND_XATTR) {
        Some(x) if x.value == want => return,
        Some(x) => x.value = want.to_vec(),
        None => {
            inode.xattrs.push(Xattr {
                name: BACKEND_XATTR.to_string(),
                value: want.to_vec(),
            });
            inode.xattrs.sort_by(|a, b| a.name.cmp(&b.name));
        }
    }
    if let Some(t) = inode.tier.as_mut() {
        t.dirty = true;
    }
}

/// The placement a directory asks of the entries created in it, if it says.
pub(crate) fn dir_mode(dir: &Inode) -> Option<PlacementMode> {
    dir.xattrs
        .iter()
        .find(|x| x.name == PLACEMENT_XATTR)
        .and_then(|x| PlacementMode::parse(&x.value))
}

impl Data<'_> {
    /// Gives a new entry the placement its directory asks (else the deployment's): a new
    /// directory inherits the directory's attribute; a file placed `local` gets a file id
    /// naming its home, when this host has a daemon that can take it.
    pub(crate) async fn place_new(&self, dir: Option<&Inode>, inode: &mut Inode) {
        inherit_backend(dir, inode);
        let asked = dir.and_then(dir_mode);
        match inode.kind {
            FileKind::Dir => {
                if let Some(mode) = asked {
                    if !inode.xattrs.iter().any(|x| x.name == PLACEMENT_XATTR) {
                        inode.xattrs.push(Xattr {
                            name: PLACEMENT_XATTR.to_string(),
                            value: mode.as_str().as_bytes().to_vec(),
                        });
                        inode.xattrs.sort_by(|a, b| a.name.cmp(&b.name));
                    }
                }
            }
            FileKind::File => {
                let mode = asked.unwrap_or(self.config().placement);
                if mode == PlacementMode::Local {
                    let random = inode.file_id as u64;
                    if let Some(home) = self.local_home(random).await {
                        if let Some(id) = eddy_placement::local_file_id(home, random) {
                            inode.file_id = id;
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// The daemon of this host a new file placed by locality goes to (with several, one by
    /// hash of the file's random bits), if it is up and has room for a chunk; `None`: hash.
    async fn local_home(&self, random: u64) -> Option<u32> {
        let view = &self.0.local;
        let home = eddy_placement::Placement::new(view.here.clone())?
            .owner(eddy_placement::chunk_hash(u128::from(random), 0));
        if self.rpc().is_down(home) {
            return None;
        }
        if let Some(ok) = view.fresh(home) {
            return ok.then_some(home);
        }
        let ok = match self.rpc().try_call(home, req::Status).await {
            Ok(st) => {
                let cs = self.config().chunk_size;
                let cap = self.config().capacity_bytes;
                let full =
                    (cap > 0 && st.chunk_bytes.saturating_add(cs) > cap) || st.fs_avail_bytes < cs;
                if full {
                    tracing::debug!(home, "local daemon is full: new files are hashed");
                }
                !full
            }
            Err(e) => {
                tracing::debug!(
                    home,
                    "local daemon unreachable, new files are hashed: {e:?}"
                );
                false
            }
        };
        view.note(home, ok);
        ok.then_some(home)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_config::{BackendDecl, Config, Link, PlacementRule, BACKEND_XATTR};
    use eddy_proto::{TierState, Timespec};

    fn config() -> Config {
        let decl = |name: &str, path: &str| BackendDecl {
            name: name.into(),
            prefix: "/w".into(),
            path: path.into(),
            kind: String::new(),
            capacity_bytes: 0,
            read_only: false,
        };
        Config {
            links: vec![Link {
                prefix: "/w".into(),
                backend: "/a".into(),
            }],
            backends: vec![decl("fast", "/a"), decl("archive", "/b")],
            placement_rules: vec![PlacementRule {
                backend: "archive".into(),
                path: Some("/w/**/*.tar".into()),
                min_size: None,
                max_size: None,
                uid: None,
                gid: None,
                io_mode: None,
            }],
            ..Config::default()
        }
    }

    fn file(backend: &str, in_backend: bool) -> Inode {
        let mut i = Inode::new(FileKind::File, 9, 0o644, 0, 0);
        i.xattrs.push(Xattr {
            name: BACKEND_XATTR.into(),
            value: backend.as_bytes().to_vec(),
        });
        i.tier = Some(TierState {
            backend_mtime: Timespec {
                sec: i64::from(in_backend),
                nsec: 0,
            },
            backend_size: 0,
            dirty: false,
        });
        i
    }

    fn named(i: &Inode) -> Option<&[u8]> {
        i.xattrs
            .iter()
            .find(|x| x.name == BACKEND_XATTR)
            .map(|x| &x.value[..])
    }

    #[test]
    fn a_rename_names_the_backend_of_the_new_place() {
        let cfg = config();
        // In a backend: moved to where the new name's rule says, at its next write-back.
        let mut i = file("fast", true);
        retarget_backend(&cfg, None, "/w/run/x.tar", &mut i);
        assert_eq!(named(&i), Some(&b"archive"[..]));
        assert!(i.tier.is_some_and(|t| t.dirty));
        // Where it is already: nothing changes.
        let mut i = file("fast", true);
        retarget_backend(&cfg, None, "/w/run/x", &mut i);
        assert_eq!(named(&i), Some(&b"fast"[..]));
        assert!(i.tier.is_some_and(|t| !t.dirty));
        // The new directory's attribute comes before the rules.
        let mut dir = Inode::new(FileKind::Dir, 3, 0o755, 0, 0);
        dir.xattrs.push(Xattr {
            name: BACKEND_XATTR.into(),
            value: b"fast".to_vec(),
        });
        let mut i = file("archive", true);
        retarget_backend(&cfg, Some(&dir), "/w/keep/x.tar", &mut i);
        assert_eq!(named(&i), Some(&b"fast"[..]));
        // Not in a backend yet: only the new directory's attribute, placed later.
        let mut i = file("archive", false);
        retarget_backend(&cfg, None, "/w/run/x", &mut i);
        assert_eq!(named(&i), None);
        // Several names: stays.
        let mut i = file("fast", true);
        i.shared = Some(Default::default());
        retarget_backend(&cfg, None, "/w/run/x.tar", &mut i);
        assert_eq!(named(&i), Some(&b"fast"[..]));
    }
}
