//! Extended attributes, kept in the entry's record (so they move with it on rename and are
//! written atomically with it).

use super::Apply;
use crate::state::State;
use bytes::Bytes;
use eddy_proto::{req, Errno, Inode};

impl Apply for req::SetXattr {
    fn apply(self, st: &State) -> Result<Inode, Errno> {
        st.meta
            .set_xattr(&self.path, &self.name, self.value, self.how, &st.tier)
    }
}

impl Apply for req::GetXattr {
    fn apply(self, st: &State) -> Result<Bytes, Errno> {
        st.meta
            .get_xattr(&self.path, &self.name, &st.tier)
            .map(Bytes::from)
    }
}

impl Apply for req::ListXattr {
    fn apply(self, st: &State) -> Result<Vec<String>, Errno> {
        st.meta.list_xattr(&self.path, &st.tier)
    }
}

impl Apply for req::RemoveXattr {
    fn apply(self, st: &State) -> Result<Inode, Errno> {
        st.meta.remove_xattr(&self.path, &self.name, &st.tier)
    }
}
