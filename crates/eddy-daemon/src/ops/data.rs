//! File data: writes, reads, allocation, truncation, removal, sync and scrub of the chunks
//! this daemon owns (`owner(hash(file_id, k))`). A file under a linked prefix goes through
//! the backend tier (fetched on a miss, dirty until written back).

use super::Apply;
use crate::state::State;
use eddy_proto::{req, Backing, Errno, FileId, Pattern, Piece, ReadReply, ScrubPage, StreamHint};

impl Apply for req::Write {
    fn apply(self, st: &State) -> Result<(), Errno> {
        let backing = self.backing.map(|b| st.linked(b)).transpose()?;
        let sums = (!self.sums.is_empty()).then_some(&self.sums[..]);
        if let Some(sums) = sums {
            st.chunks
                .verify_payload(self.file_id, &self.pieces, &self.data, sums)?;
        }
        st.write(
            self.file_id,
            &self.pieces,
            &self.data,
            sums,
            backing.as_ref(),
        )?;
        st.note_moved_chunks(self.file_id, self.pieces.iter().map(|p| p.chunk))?;
        if let Some(hint) = self.hint {
            st.preallocate_ahead(self.file_id, &self.pieces, hint);
        }
        Ok(())
    }
}

/// Holes and bytes past a chunk's end read as zeros. With checksums on, the stored ones are
/// verified first and the reply carries the checksums of what it returns.
impl Apply for req::Read {
    fn apply(self, st: &State) -> Result<ReadReply, Errno> {
        let chunks = &st.chunks;
        if let Some(b) = self.backing {
            let b = st.linked(b)?;
            let data = st.with_room(|| st.tier.read(chunks, self.file_id, &self.pieces, &b))?;
            if let Some(hint) = self.hint {
                st.read_ahead(self.file_id, &self.pieces, &b, hint);
            }
            // The tier verified what it read from the chunks (and checksummed what it
            // fetched): the reply's checksums are computed over the verified bytes.
            let sums = chunks
                .checksum_block()
                .map(|block| eddy_proto::checksum::sums(&self.pieces, &data, block));
            return Ok(ReadReply {
                data: data.into(),
                sums,
            });
        }
        match chunks.checksum_block() {
            Some(_) => {
                let (data, sums) = chunks.read_checked(self.file_id, &self.pieces)?;
                Ok(ReadReply {
                    data: data.into(),
                    sums: Some(sums),
                })
            }
            None => Ok(ReadReply {
                data: chunks.read(self.file_id, &self.pieces)?.into(),
                sums: None,
            }),
        }
    }
}

impl Apply for req::Allocate {
    fn apply(self, st: &State) -> Result<(), Errno> {
        st.with_room(|| st.chunks.allocate(self.file_id, &self.pieces))?;
        st.note_moved_chunks(self.file_id, self.pieces.iter().map(|p| p.chunk))
    }
}

impl Apply for req::TruncateData {
    fn apply(self, st: &State) -> Result<(), Errno> {
        let held = st.chunks.held_of(self.file_id);
        st.chunks.truncate(self.file_id, self.size)?;
        st.note_moved_chunks(self.file_id, held)?;
        st.tier.truncated(self.file_id, self.size)
    }
}

impl Apply for req::RemoveData {
    fn apply(self, st: &State) -> Result<(), Errno> {
        let held = st.chunks.held_of(self.file_id);
        st.chunks.remove(self.file_id)?;
        st.note_moved_chunks(self.file_id, held)?;
        st.tier.forget(self.file_id)
    }
}

/// One file's chunks, or everything; the metadata store is persisted either way.
impl Apply for req::Sync {
    fn apply(self, st: &State) -> Result<(), Errno> {
        match self.file_id {
            Some(id) => st.chunks.sync(id)?,
            None => st.chunks.sync_all()?,
        }
        st.meta.persist()
    }
}

impl Apply for req::Scrub {
    fn apply(self, st: &State) -> Result<ScrubPage, Errno> {
        let limit = self.limit.min(st.settings.config.scrub_page_chunks);
        st.chunks.scrub(self.after, limit)
    }
}

impl State {
    /// Space ahead of a sequential writer (decision 0074): the slots of the chunks this
    /// daemon owns among the `write_prealloc_chunks` after the write's last piece are
    /// preallocated, within 16 such windows per daemon. Other patterns, `stream_hints` off
    /// or a window of 0: nothing.
    pub(crate) fn preallocate_ahead(&self, id: FileId, pieces: &[Piece], hint: StreamHint) {
        let cfg = &self.settings.config;
        let window = u64::from(cfg.write_prealloc_chunks);
        if !cfg.stream_hints || window == 0 || hint.pattern != Pattern::Sequential {
            return;
        }
        let Some(last) = pieces.iter().map(|p| p.chunk).max() else {
            return;
        };
        let ks: Vec<u64> = (1..=window)
            .filter_map(|j| last.checked_add(j))
            .filter(|&k| {
                k.checked_add(1)
                    .and_then(|e| e.checked_mul(cfg.chunk_size))
                    .is_some_and(|e| e <= i64::MAX as u64)
            })
            .filter(|&k| self.tier.owns_chunk(id, k))
            .collect();
        let bound = window.saturating_mul(cfg.chunk_size).saturating_mul(16);
        self.chunks.preallocate(id, &ks, bound);
    }

    /// A write: through the tier for a linked file.
    fn write(
        &self,
        file_id: FileId,
        pieces: &[Piece],
        data: &[u8],
        sums: Option<&[u32]>,
        backing: Option<&Backing>,
    ) -> Result<(), Errno> {
        self.with_room(|| match backing {
            Some(b) => self.tier.write(&self.chunks, file_id, pieces, data, b),
            None => self.chunks.write_with_sums(file_id, pieces, data, sums),
        })?;
        if backing.is_none() && self.backend.is_active() {
            self.tier.after_growth(&self.chunks);
        }
        Ok(())
    }
}
