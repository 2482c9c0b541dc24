//! Entries: create, stat, remove, attributes, sizes, listings, directory times and link
//! counts. Addressed to the owner of the entry's path; the metadata store does the work,
//! with the backend tier (`st.tier`, a `Through`) for the import and write-through of a
//! linked path under the entry's key lock; a listing of a linked directory is imported by
//! the tier first.

use super::Apply;
use crate::state::State;
use eddy_proto::{req, DirPage, Errno, Inode, Offset, SubtreePage};

impl Apply for req::Create {
    fn apply(self, st: &State) -> Result<Inode, Errno> {
        st.meta
            .create(&self.path, self.inode, self.exclusive, &st.tier)
    }
}

impl Apply for req::Stat {
    fn apply(self, st: &State) -> Result<Inode, Errno> {
        st.meta.stat(&self.path, &st.tier)
    }
}

impl Apply for req::Remove {
    fn apply(self, st: &State) -> Result<Inode, Errno> {
        st.meta.remove(&self.path, self.kind, &st.tier)
    }
}

impl Apply for req::SetAttr {
    fn apply(self, st: &State) -> Result<Inode, Errno> {
        st.meta.set_attr(&self.path, &self.attr, &st.tier)
    }
}

impl Apply for req::GrowSize {
    fn apply(self, st: &State) -> Result<Inode, Errno> {
        st.meta.grow_size(&self.path, self.size, &st.tier)
    }
}

impl Apply for req::ReserveAppend {
    fn apply(self, st: &State) -> Result<Offset, Errno> {
        st.meta
            .reserve_append(&self.path, self.len, &st.tier)
            .map(Offset)
    }
}

impl Apply for req::Insert {
    fn apply(self, st: &State) -> Result<(), Errno> {
        st.meta.insert(&self.path, self.inode, self.replace)
    }
}

impl Apply for req::Readdir {
    fn apply(self, st: &State) -> Result<DirPage, Errno> {
        if self.after.is_none() {
            st.tier.import_dir(&st.meta, &self.dir)?;
        }
        let page = st
            .meta
            .readdir(&self.dir, self.after.as_deref(), self.limit)?;
        Ok(DirPage {
            entries: page.items,
            more: page.more,
        })
    }
}

impl Apply for req::HasChildren {
    fn apply(self, st: &State) -> Result<bool, Errno> {
        st.tier.import_dir(&st.meta, &self.dir)?;
        st.meta.has_children(&self.dir)
    }
}

impl Apply for req::ListSubtree {
    fn apply(self, st: &State) -> Result<SubtreePage, Errno> {
        let page = st
            .meta
            .list_subtree(&self.dir, self.after.as_deref(), self.limit)?;
        Ok(SubtreePage {
            entries: page.items,
            more: page.more,
        })
    }
}

impl Apply for req::TouchDir {
    fn apply(self, st: &State) -> Result<(), Errno> {
        st.meta.touch_dir(&self.path, self.time, &st.tier)
    }
}

impl Apply for req::Accessed {
    fn apply(self, st: &State) -> Result<(), Errno> {
        st.meta
            .accessed(&self.path, self.time, self.strict, &st.tier)
    }
}

impl Apply for req::ClearSetId {
    fn apply(self, st: &State) -> Result<Inode, Errno> {
        st.meta.clear_setid(&self.path, &st.tier)
    }
}

impl Apply for req::CountSubdirs {
    fn apply(self, st: &State) -> Result<(), Errno> {
        st.meta.count_subdirs(&self.dir, self.delta, &st.tier)
    }
}
