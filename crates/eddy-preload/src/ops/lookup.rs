//! Look-ups: an Eddy path's entry, and where its symlinks lead.

use super::MAX_HOPS;
use crate::path::{link_target, Target};
use crate::state::{run, R};
use eddy_client::{Errno, FileKind, Inode};
use std::ffi::CString;

pub(super) fn lstat_ours(p: &str) -> R<Inode> {
    let p = p.to_string();
    run(move |c| async move { c.stat(&p).await })
}

/// Follows symlinks from Eddy path `p`: where the chain ends (an Eddy path, or a real path
/// when a link leads out of the prefix).
pub(super) fn follow(mut p: String) -> R<(Target, Option<Inode>)> {
    for _ in 0..MAX_HOPS {
        let i = lstat_ours(&p)?;
        if i.kind != FileKind::Symlink {
            return Ok((Target::Ours(p), Some(i)));
        }
        match link_target(&p, i.target.as_deref().unwrap_or(""))? {
            Target::Ours(q) => p = q,
            other => return Ok((other, None)),
        }
    }
    Err(Errno::new(
        libc::ELOOP,
        format!("too many symbolic links at {p}"),
    ))
}

/// The path an Eddy operation that follows symlinks acts on; Err(real path) when the links
/// lead out of the prefix.
pub(super) fn follow_path(p: String) -> R<Result<String, CString>> {
    match follow(p)? {
        (Target::Ours(q), _) => Ok(Ok(q)),
        (Target::RealAt(c), _) => Ok(Err(c)),
        (Target::Real, _) => Err(Errno::eio("unexpected real target")),
    }
}
