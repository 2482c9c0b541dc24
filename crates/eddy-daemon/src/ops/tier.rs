//! The backend tier: read-ahead and stage-in (prefetch), write-back (flush, finalise),
//! pins, validation on open, the write-through of renames and the finalisation of dirty
//! files. The tier does the backend I/O; the records it reads and writes are the metadata
//! store's (`st.meta`).

use super::Apply;
use crate::state::State;
use eddy_proto::path::normalize;
use eddy_proto::{req, Errno, Flushed, Revalidated};

impl Apply for req::Prefetch {
    fn apply(self, st: &State) -> Result<u64, Errno> {
        let backing = st.linked(self.backing)?;
        st.with_room(|| {
            st.tier
                .prefetch(&st.chunks, self.file_id, &self.chunks, &backing, self.pin)
        })
    }
}

impl Apply for req::FlushDirty {
    fn apply(self, st: &State) -> Result<Flushed, Errno> {
        let (files, more) = st
            .tier
            .flush_dirty(&st.chunks, &self.prefix, self.after, self.limit);
        Ok(Flushed { files, more })
    }
}

impl Apply for req::Unpin {
    fn apply(self, st: &State) -> Result<u64, Errno> {
        st.tier.unpin(&self.prefix)
    }
}

impl Apply for req::Rebind {
    fn apply(self, st: &State) -> Result<(), Errno> {
        let limits = st.meta.limits();
        let (from, to) = (normalize(&self.from, limits)?, normalize(&self.to, limits)?);
        st.tier.rebind(&from, &to)
    }
}

impl Apply for req::Validate {
    fn apply(self, st: &State) -> Result<Revalidated, Errno> {
        let (inode, dropped) = st.tier.validate(&st.meta, &self.path, self.for_write)?;
        Ok(Revalidated { inode, dropped })
    }
}

impl Apply for req::BackendRename {
    fn apply(self, st: &State) -> Result<(), Errno> {
        st.tier.backend_rename(&st.meta, &self.from, &self.to)
    }
}

impl Apply for req::FinalizeDirty {
    fn apply(self, st: &State) -> Result<Flushed, Errno> {
        let (files, more) = st.tier.finalize_dirty(
            &st.meta,
            &self.prefix,
            &self.skip,
            self.after.as_deref(),
            self.limit,
        )?;
        Ok(Flushed { files, more })
    }
}

impl Apply for req::CheckBackend {
    fn apply(self, st: &State) -> Result<Flushed, Errno> {
        let (files, more) = st.tier.check_dirty(
            &st.meta,
            &self.prefix,
            self.after.as_deref(),
            self.limit,
            (self.overwrite, &self.ours),
        )?;
        Ok(Flushed { files, more })
    }
}

impl Apply for req::WrittenBack {
    fn apply(self, st: &State) -> Result<Flushed, Errno> {
        let limits = st.meta.limits();
        let prefix = normalize(&self.prefix, limits)?;
        Ok(Flushed {
            files: st.tier.written_back(&prefix),
            more: false,
        })
    }
}

impl Apply for req::HoldBack {
    fn apply(self, st: &State) -> Result<u64, Errno> {
        st.tier.hold_back(&self.files, self.hold)
    }
}
