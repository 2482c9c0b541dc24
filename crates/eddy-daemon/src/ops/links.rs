//! Hard links (decision 0009): counting names, and requests on a file's identity record.

use super::Apply;
use crate::handler::State;
use eddy_proto::{req, Errno, Inode, Reply, ReplyType, Request};

impl Apply for req::Link {
    fn apply(self, st: &State) -> Result<Inode, Errno> {
        st.meta.link(&self.path, st.settings.id, &st.tier)
    }
}

impl Apply for req::DropName {
    fn apply(self, st: &State) -> Result<Inode, Errno> {
        let left = st.meta.drop_name(self.file_id)?;
        if left.nlink == 0 {
            st.tier.forget_names(self.file_id)?;
        }
        Ok(left)
    }
}

/// The request it carries, applied to the identity record of the shared file: the
/// path-addressed requests on an entry, with the identity record's name for the path.
/// Anything else (an `OnIdentity` in it too: decoding never recurses) is EINVAL.
impl Apply for req::OnIdentity {
    fn apply(self, st: &State) -> Result<Reply, Errno> {
        let op: Request = eddy_proto::decode(&self.op, self.op.len() as u64)?;
        // Under a linked prefix: the identity of a backend file with several names is made
        // here on first use, and the name is one to write back through (decision 0029).
        if let Some(name) = op.path() {
            st.tier.identity_of_name(&st.meta, self.file_id, name)?;
        }
        let path = eddy_proto::path::identity_path(self.file_id);
        fn run<R: Apply>(st: &State, r: R) -> Result<Reply, Errno> {
            r.apply(st).map(ReplyType::into_reply)
        }
        match op {
            // An existing file opened (O_CREAT without O_EXCL): the identity record as it is.
            Request::Stat(_) | Request::Create(_) => run(st, req::Stat { path }),
            Request::SetAttr(r) => run(st, req::SetAttr { path, ..r }),
            Request::GrowSize(r) => run(st, req::GrowSize { path, ..r }),
            Request::ReserveAppend(r) => run(st, req::ReserveAppend { path, ..r }),
            Request::Link(_) => run(st, req::Link { path }),
            Request::Validate(r) => run(st, req::Validate { path, ..r }),
            Request::SetXattr(r) => run(st, req::SetXattr { path, ..r }),
            Request::GetXattr(r) => run(st, req::GetXattr { path, ..r }),
            Request::ListXattr(_) => run(st, req::ListXattr { path }),
            Request::RemoveXattr(r) => run(st, req::RemoveXattr { path, ..r }),
            Request::ClearSetId(_) => run(st, req::ClearSetId { path }),
            Request::Accessed(r) => run(st, req::Accessed { path, ..r }),
            other => Err(Errno::einval(format!(
                "{} does not apply to a file's identity record",
                other.op_name()
            ))),
        }
    }
}

/// The backend half of a link under a linked prefix (decision 0029).
impl Apply for req::BackendLink {
    fn apply(self, st: &State) -> Result<(), Errno> {
        st.tier
            .backend_link(&st.meta, self.file_id, &self.from, &self.to)
    }
}

impl Apply for req::LinkedNames {
    fn apply(self, st: &State) -> Result<Vec<String>, Errno> {
        st.tier.linked_names(self.file_id)
    }
}
