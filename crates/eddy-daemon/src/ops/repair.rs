//! Copies and repair (decisions 0020, 0021): metadata copies from a peer, hints of what an
//! owner missed, whole chunks pushed by a repair, and the pushes `eddy repair` asks for.

use super::{Apply, Serve};
use crate::advisory::ConnId;
use crate::state::State;
use eddy_proto::repair::Digest;
use eddy_proto::{req, Errno, Piece};
use std::sync::Arc;

/// Stores the keys' records as given; replies the digest of each as held afterwards.
impl Apply for req::Replicate {
    fn apply(self, st: &State) -> Result<Vec<Digest>, Errno> {
        st.meta.apply_replica(&self.changes)?;
        let keys: Vec<Vec<u8>> = self.changes.into_iter().map(|c| c.key).collect();
        // The sender's state of these keys wins here: what this daemon held for the other
        // owners on them, or left pending before a restart, is superseded (decision 0080).
        for k in &keys {
            st.meta.pending().forget(k)?;
            if let Some(repair) = st.repair() {
                repair.hints.drop_key(k)?;
            }
        }
        let held = st.meta.key_states(keys)?;
        Ok(held
            .iter()
            .map(|s| eddy_proto::repair::digest(s.value.as_deref()))
            .collect())
    }
}

impl Apply for req::Hint {
    fn apply(self, st: &State) -> Result<(), Errno> {
        st.add_chunk_hints(self.target, self.file_id, &self.chunks)
    }
}

/// A chunk's whole content (or its removal), checked against its checksums before it is
/// stored; replies the digest of the chunk as held afterwards.
impl Apply for req::PutChunk {
    fn apply(self, st: &State) -> Result<Vec<Digest>, Errno> {
        let chunks = &st.chunks;
        let sums = (!self.sums.is_empty() && self.present).then_some(&self.sums[..]);
        if !self.present && !self.data.is_empty() {
            return Err(Errno::einval("a chunk removed carries no data"));
        }
        if self.present {
            let len = u32::try_from(self.data.len())
                .map_err(|_| Errno::einval("a chunk's content exceeds a chunk"))?;
            let p = [Piece {
                chunk: self.chunk,
                offset: 0,
                len,
            }];
            chunks.check_pieces(&p)?;
            if let Some(sums) = sums {
                chunks.verify_payload(self.file_id, &p, &self.data, sums)?;
            }
        }
        let data = self.present.then_some(&self.data[..]);
        let digest = st.with_room(|| chunks.put_whole(self.file_id, self.chunk, data, sums))?;
        // A repair of this daemon's copy while items move: it goes on to the new owners.
        st.note_moved_chunks(self.file_id, [self.chunk])?;
        Ok(vec![digest])
    }
}

impl Serve for req::RepairFor {
    async fn serve(self, st: &Arc<State>, _conn: ConnId) -> Result<u64, Errno> {
        st.repair_for(self.target, self.full).await
    }
}

impl Serve for req::Repair {
    async fn serve(self, st: &Arc<State>, _conn: ConnId) -> Result<(), Errno> {
        st.repair_all(self.full).await
    }
}
