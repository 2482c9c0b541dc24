//! The namespace layer: every request about names and the records they lead to, sent to
//! the owner of a path's metadata (`meta`, failing over along its copies) or to the holders
//! of a file's identity record (decision 0009): lookups and stats, creates and removals,
//! listings, directory times, renames, hard links, extended attributes and special files,
//! set-id clearing, what an open file asks of its name's owner (revalidation, atime, append
//! offsets, sizes), advisory locks (their table is on the daemon a file's id names; they
//! belong to the file, not to its bytes).
//!
//! It is one of the two parts of the client that send requests (the other is `data`, for
//! chunks and daemons as stores); the `Client` façade and the modules beside these two call
//! into them and send nothing themselves (`scripts/check-client-layers.py`). `Namespace` is a
//! view of the client: its methods reach the client's state (`self.0`) and, through `Deref`,
//! the façade's own methods.

pub(crate) mod dir;
pub(crate) mod dirtimes;
mod entries;
mod lease_batches;
pub(crate) mod leases;
mod links;
pub(crate) mod locks;
mod lookup;
mod open;
pub(crate) mod rename;
mod special;

use crate::{Client, Errno, Inner};
use eddy_proto::{req, typed_reply, Reply, Request, Rpc};
use eddy_rpc::Unanswered;
use std::sync::Arc;

/// The namespace layer of a client: the client's state and the client itself.
pub(crate) struct Namespace<'a>(pub(crate) &'a Arc<Inner>, &'a Client);

impl Namespace<'_> {
    /// The client itself, to be kept (by a task in the background).
    pub(crate) fn client(&self) -> Client {
        self.1.clone()
    }
}

impl std::ops::Deref for Namespace<'_> {
    type Target = Client;

    fn deref(&self) -> &Client {
        self.1
    }
}

impl Client {
    /// The namespace layer of this client.
    pub(crate) fn ns(&self) -> Namespace<'_> {
        Namespace(&self.0, self)
    }
}

impl Namespace<'_> {
    /// Sends a metadata request to the owner of `path` (the path is only hashed, not kept).
    /// A path naming a file with several names is answered with where its identity record is
    /// (decision 0009): the request goes on there.
    pub(in crate::namespace) async fn meta<R: Rpc>(
        &self,
        path: &str,
        req: R,
    ) -> Result<R::Reply, Errno> {
        typed_reply::<R>(self.meta_raw(path, req.into()).await?)
    }

    /// `meta` for a request as it travels, answered with the reply as it came.
    ///
    /// A request refused for this client's membership epoch was not applied: once the rpc
    /// layer has followed the hosts file, the owners are computed again from the new view and
    /// the request sent again (`Daemons::retry_moved`; decision 0081).
    pub(in crate::namespace) async fn meta_raw(
        &self,
        path: &str,
        req: Request,
    ) -> Result<Reply, Errno> {
        self.rpc()
            .retry_moved(|| async {
                let owners = self.rpc().meta_owners(path);
                let reply = match owners.as_slice() {
                    [owner] => self.rpc().call_raw(*owner, &req).await?,
                    _ => self.failover(&owners, &req).await?,
                };
                match reply {
                    Reply::Shared { daemon, file_id } => {
                        self.on_identity_raw(daemon, file_id, &req).await
                    }
                    reply => Ok(reply),
                }
            })
            .await
    }

    /// Sends `req` to the first of `targets` that can be reached; an answer (error or not)
    /// from any of them is the result, answered as it came: the rpc layer's failover, except
    /// that an exclusive create refused with EEXIST by a copy after another could not be
    /// reached is ours if the entry carries our file id.
    pub(crate) async fn failover(&self, targets: &[u32], req: &Request) -> Result<Reply, Errno> {
        match self.rpc().failover_to(targets, req).await {
            Ok(reply) => Ok(reply),
            Err(Unanswered::Refused {
                daemon,
                error,
                after_unreachable: true,
            }) if error.errno == libc::EEXIST => {
                self.created_before(daemon, req).await.ok_or(error)
            }
            Err(u) => Err(u.into_errno()),
        }
    }

    /// An exclusive create that a copy lost on the way may have applied (and passed on)
    /// before it died: the entry is ours when it carries our file id.
    async fn created_before(&self, daemon: u32, req: &Request) -> Option<Reply> {
        let Request::Create(req::Create {
            path,
            inode,
            exclusive: true,
        }) = req
        else {
            return None;
        };
        let stat = req::Stat { path: path.clone() };
        match self.rpc().try_call(daemon, stat).await {
            Ok(i) if i.file_id == inode.file_id => Some(Reply::Inode(i)),
            _ => None,
        }
    }
}
