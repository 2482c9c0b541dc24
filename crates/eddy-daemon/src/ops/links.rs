//! Hard links (decision 0009): counting names, and requests on a file's identity record.

use super::Apply;
use crate::state::State;
use eddy_proto::{req, Errno, Inode, Reply, Request};

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

/// The request it carries, applied to the identity record of the shared file: the requests
/// the table's `id` column lets reach it (`Request::on_identity`), with the identity
/// record's name for their path. Anything else (an `OnIdentity` in it too: decoding never
/// recurses) is EINVAL.
impl Apply for req::OnIdentity {
    fn apply(self, st: &State) -> Result<Reply, Errno> {
        let op: Request = eddy_proto::decode(&self.op, self.op.len() as u64)?;
        // Under a linked prefix: the identity of a backend file with several names is made
        // here on first use, and the name is one to write back through (decision 0029).
        if let Some(name) = op.path() {
            st.tier.identity_of_name(&st.meta, self.file_id, name)?;
        }
        let path = eddy_proto::path::identity_path(self.file_id);
        let op = op.on_identity(path).map_err(|other| {
            Errno::einval(format!(
                "{} does not apply to a file's identity record",
                other.name()
            ))
        })?;
        super::apply_on_identity(st, op)
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
