//! eddy-placement: the pure function that tells every client, on its own, which daemon holds
//! the metadata of a path and which holds chunk k of a file.
//!
//! Metadata of a path lives on `owner(hash(path))`; chunk k of a file lives on
//! `owner(hash(file_id, k))`. The hash is xxh3-64 with fixed seeds (never a toolchain- or
//! process-randomised hash), and `owner` is rendezvous (highest-random-weight) hashing over
//! the ordered list of daemon ids, so adding a daemon moves only ~1/N of the items and a
//! ranked list of R distinct daemons is available for replication. This crate does no I/O.
//!
//! A file placed by locality (decision 0043) carries its home daemon in its file id: the top
//! 48 bits are `LOCAL_TAG`, the next 16 the home's id, the low 64 random. Every chunk of such
//! a file has the home as its first owner (the other R-1 copies by the usual ranking among
//! the other daemons), so whoever knows the file id (client, peer, repair, the tier) finds the
//! chunks without any other record. Ids made for hashed files never carry the tag
//! (`hashed_file_id`).

#![forbid(unsafe_code)]

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Seed of the path hash. Changing it re-places every file: never do.
pub const PATH_SEED: u64 = 0x4564_6479_5061_7468; // "EddyPath"
/// Seed of the chunk hash. Changing it re-places every chunk: never do.
pub const CHUNK_SEED: u64 = 0x4564_6479_4368_6e6b; // "EddyChnk"
/// Seed of the hash of a hard-linked file's identity record (decision 0083). Changing it
/// re-places identity records whose daemon left: never do.
pub const IDENTITY_SEED: u64 = 0x4564_6479_4964_6e74; // "EddyIdnt"
/// Seed of the rendezvous score.
pub const OWNER_SEED: u64 = 0x4564_6479_4f77_6e72; // "EddyOwnr"

/// The top 48 bits of a file id placed by locality ("EddyLo").
pub const LOCAL_TAG: u64 = 0x4564_6479_4c6f;

/// A file id for a file placed on daemon `home` (its chunks' first owner), from 64 random
/// bits; `None` when the id does not fit the 16 bits the id keeps for it (hash the file).
pub fn local_file_id(home: u32, random: u64) -> Option<u128> {
    let home = u16::try_from(home).ok()?;
    Some((u128::from(LOCAL_TAG) << 80) | (u128::from(home) << 64) | u128::from(random))
}

/// The home daemon a file id names, when the file was placed by locality.
pub fn home_of(file_id: u128) -> Option<u32> {
    ((file_id >> 80) as u64 == LOCAL_TAG).then_some(u32::from((file_id >> 64) as u16))
}

/// A random id made into a hashed file's id: one that happens to carry the local tag gets
/// its top bit flipped (so it cannot be read as placed by locality).
pub fn hashed_file_id(random: u128) -> u128 {
    if home_of(random).is_some() {
        random ^ (1u128 << 127)
    } else {
        random
    }
}

/// Stable 64-bit hash of a normalised path.
pub fn path_hash(path: &str) -> u64 {
    xxh3_64_with_seed(path.as_bytes(), PATH_SEED)
}

/// Stable 64-bit hash of chunk `index` of the file `file_id`.
pub fn chunk_hash(file_id: u128, index: u64) -> u64 {
    let mut buf = [0u8; 24];
    buf[..16].copy_from_slice(&file_id.to_le_bytes());
    buf[16..].copy_from_slice(&index.to_le_bytes());
    xxh3_64_with_seed(&buf, CHUNK_SEED)
}

/// Stable 64-bit hash of the identity record of the hard-linked file `file_id`.
pub fn identity_hash(file_id: u128) -> u64 {
    xxh3_64_with_seed(&file_id.to_le_bytes(), IDENTITY_SEED)
}

/// Rendezvous score of an item hash on a daemon id.
fn score(item: u64, daemon: u32) -> u64 {
    let mut buf = [0u8; 12];
    buf[..8].copy_from_slice(&item.to_le_bytes());
    buf[8..].copy_from_slice(&daemon.to_le_bytes());
    xxh3_64_with_seed(&buf, OWNER_SEED)
}

/// The ordered daemon list of a deployment, by stable id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    ids: Vec<u32>,
}

impl Placement {
    /// A placement over the given daemon ids (any order; duplicates removed).
    /// Returns `None` when the list is empty.
    pub fn new(mut ids: Vec<u32>) -> Option<Placement> {
        ids.sort_unstable();
        ids.dedup();
        (!ids.is_empty()).then_some(Placement { ids })
    }

    /// The daemon ids, ascending.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The daemon owning an item hash: the one with the highest rendezvous score
    /// (ties broken by the lower id, which cannot happen for distinct ids in practice).
    pub fn owner(&self, item: u64) -> u32 {
        let mut best = self.ids[0];
        let mut best_score = score(item, best);
        for &id in &self.ids[1..] {
            let s = score(item, id);
            if s > best_score {
                best = id;
                best_score = s;
            }
        }
        best
    }

    /// The `r` daemons (or all, if fewer) ranked by score: the first is `owner(item)`, the
    /// rest are the replica targets in order.
    pub fn owners(&self, item: u64, r: usize) -> Vec<u32> {
        let mut scored: Vec<(u64, u32)> =
            self.ids.iter().map(|&id| (score(item, id), id)).collect();
        scored.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().take(r).map(|(_, id)| id).collect()
    }

    /// Owner of the metadata of a normalised path.
    pub fn meta_owner(&self, path: &str) -> u32 {
        self.owner(path_hash(path))
    }

    /// The home of a file placed by locality, if that daemon is in this placement (a home
    /// that is not is ignored: the file is hashed).
    pub fn home(&self, file_id: u128) -> Option<u32> {
        home_of(file_id).filter(|h| self.ids.binary_search(h).is_ok())
    }

    /// Owner of chunk `index` of file `file_id`: its home for a file placed by locality,
    /// else by hash.
    pub fn chunk_owner(&self, file_id: u128, index: u64) -> u32 {
        match self.home(file_id) {
            Some(h) => h,
            None => self.owner(chunk_hash(file_id, index)),
        }
    }

    /// The `r` owners of chunk `index` of file `file_id` (or all daemons, if fewer), first
    /// the primary: for a file placed by locality its home, then the others by their rank
    /// for the chunk's hash; for a hashed file `owners(chunk_hash(..), r)`.
    pub fn chunk_owners(&self, file_id: u128, index: u64, r: usize) -> Vec<u32> {
        let hash = chunk_hash(file_id, index);
        match self.home(file_id) {
            None => self.owners(hash, r),
            Some(h) => {
                let mut out = Vec::with_capacity(r.min(self.ids.len()));
                if r > 0 {
                    out.push(h);
                }
                out.extend(
                    self.owners(hash, self.ids.len())
                        .into_iter()
                        .filter(|&d| d != h)
                        .take(r.saturating_sub(1)),
                );
                out
            }
        }
    }

    /// The daemon holding the identity record of the hard-linked file `file_id` whose names
    /// point at daemon `pointer` (the one that held its first name when it was linked,
    /// decision 0009): that daemon while it is in this placement, else the owner of the
    /// record's hash (decision 0083: the record follows a move that drains its daemon).
    pub fn identity_holder(&self, pointer: u32, file_id: u128) -> u32 {
        if self.ids.binary_search(&pointer).is_ok() {
            pointer
        } else {
            self.owner(identity_hash(file_id))
        }
    }

    /// The `r` daemons (or all, if fewer) holding that identity record: its holder, then
    /// the daemons after it in id order, round the ring.
    pub fn identity_owners(&self, pointer: u32, file_id: u128, r: usize) -> Vec<u32> {
        let holder = self.identity_holder(pointer, file_id);
        let start = self.ids.binary_search(&holder).unwrap_or(0);
        (0..r.min(self.ids.len()))
            .map(|i| self.ids[(start + i) % self.ids.len()])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Pinned values: if any of these change, data written by an older build would be looked
    // for on the wrong daemon. They must never change.
    #[test]
    fn pinned_hashes() {
        assert_eq!(path_hash("/"), PINNED_ROOT);
        assert_eq!(path_hash("/a/b.txt"), PINNED_AB);
        assert_eq!(
            chunk_hash(0x0123_4567_89ab_cdef_0011_2233_4455_6677, 3),
            PINNED_CHUNK
        );
        assert_eq!(
            identity_hash(0x0123_4567_89ab_cdef_0011_2233_4455_6677),
            PINNED_IDENTITY
        );
    }

    #[test]
    fn pinned_owners() {
        let p = Placement::new(vec![0, 1, 2, 3, 4, 5, 6, 7]).unwrap();
        let owners: Vec<u32> = (0..16)
            .map(|i| p.meta_owner(&format!("/dir/f{i}")))
            .collect();
        assert_eq!(owners, PINNED_OWNERS);
        let chunks: Vec<u32> = (0..16).map(|k| p.chunk_owner(42, k)).collect();
        assert_eq!(chunks, PINNED_CHUNK_OWNERS);
    }

    const PINNED_ROOT: u64 = 14057892171467246231;
    const PINNED_AB: u64 = 454331443949274485;
    const PINNED_CHUNK: u64 = 6189345827901158181;
    const PINNED_IDENTITY: u64 = 15641503764693055053;
    const PINNED_OWNERS: [u32; 16] = [7, 0, 0, 0, 7, 5, 3, 0, 2, 6, 4, 6, 7, 6, 0, 5];
    const PINNED_CHUNK_OWNERS: [u32; 16] = [5, 6, 1, 0, 6, 7, 2, 6, 6, 6, 1, 2, 7, 1, 7, 0];

    #[test]
    fn spread_is_roughly_even() {
        let p = Placement::new((0..4).collect()).unwrap();
        let mut counts = [0usize; 4];
        for i in 0..40_000u64 {
            counts[p.chunk_owner(7, i) as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "uneven spread: {counts:?}");
        }
    }

    #[test]
    fn adding_a_daemon_moves_about_one_in_n() {
        let before = Placement::new((0..9).collect()).unwrap();
        let after = Placement::new((0..10).collect()).unwrap();
        let moved = (0..20_000u64)
            .filter(|&i| before.owner(chunk_hash(1, i)) != after.owner(chunk_hash(1, i)))
            .count();
        // Expected 1/10 of the items; every moved item must go to the new daemon.
        assert!((1_500..2_500).contains(&moved), "moved {moved}");
        for i in 0..20_000u64 {
            let h = chunk_hash(1, i);
            if before.owner(h) != after.owner(h) {
                assert_eq!(after.owner(h), 9);
            }
        }
    }

    #[test]
    fn empty_list_has_no_placement() {
        assert!(Placement::new(vec![]).is_none());
    }

    #[test]
    fn local_ids_name_their_home() {
        let id = local_file_id(3, 0xdead_beef).unwrap();
        assert_eq!(home_of(id), Some(3));
        assert_eq!(local_file_id(70_000, 1), None);
        let p = Placement::new(vec![0, 1, 2, 3, 4]).unwrap();
        for k in 0..50 {
            assert_eq!(p.chunk_owner(id, k), 3);
            let owners = p.chunk_owners(id, k, 2);
            assert_eq!(owners[0], 3);
            assert_ne!(owners[1], 3);
        }
        // A home outside the deployment: the file is hashed.
        let gone = local_file_id(9, 7).unwrap();
        assert_eq!(p.home(gone), None);
        assert_eq!(p.chunk_owner(gone, 1), p.owner(chunk_hash(gone, 1)));
        // A random id that carries the tag is made a hashed one.
        assert_eq!(home_of(hashed_file_id(id)), None);
    }

    proptest! {
        #[test]
        fn an_identity_record_stays_with_its_daemon_and_follows_the_hash_when_it_leaves(
            pointer in 0u32..12, id: u128, n in 1u32..10, r in 1usize..5, extra in 10u32..14,
        ) {
            let p = Placement::new((0..n).collect()).unwrap();
            let list = p.identity_owners(pointer, id, r);
            prop_assert_eq!(list.len(), r.min(n as usize));
            prop_assert_eq!(list[0], p.identity_holder(pointer, id));
            if pointer < n {
                prop_assert_eq!(list[0], pointer);
            } else {
                prop_assert_eq!(list[0], p.owner(identity_hash(id)));
            }
            // The ring: each next id, wrapping round.
            for w in list.windows(2) {
                prop_assert_eq!(w[1], (w[0] + 1) % n);
            }
            // A daemon joining moves the record of a daemon that left only as the hash
            // moves it, and never moves the record of a daemon still there.
            let mut more: Vec<u32> = (0..n).collect();
            more.push(extra);
            let grown = Placement::new(more).unwrap();
            let after = grown.identity_holder(pointer, id);
            if pointer < n {
                prop_assert_eq!(after, pointer);
            } else if pointer != extra {
                prop_assert!(after == list[0] || after == extra);
            }
        }

        #[test]
        fn hashed_ids_place_as_before(raw: u128, k: u64, n in 1u32..20, r in 1usize..6) {
            let id = hashed_file_id(raw);
            prop_assert!(home_of(id).is_none());
            let p = Placement::new((0..n).collect()).unwrap();
            prop_assert_eq!(p.chunk_owner(id, k), p.owner(chunk_hash(id, k)));
            prop_assert_eq!(p.chunk_owners(id, k, r), p.owners(chunk_hash(id, k), r));
        }

        #[test]
        fn local_owners_are_distinct_and_start_at_home(home in 0u32..20, rnd: u64, k: u64, n in 1u32..20, r in 1usize..6) {
            let p = Placement::new((0..n).collect()).unwrap();
            let id = local_file_id(home, rnd).unwrap();
            let list = p.chunk_owners(id, k, r);
            prop_assert_eq!(list.len(), r.min(n as usize));
            if home < n {
                prop_assert_eq!(list[0], home);
            } else {
                prop_assert_eq!(&list, &p.owners(chunk_hash(id, k), r));
            }
            let mut sorted = list.clone();
            sorted.sort_unstable();
            sorted.dedup();
            prop_assert_eq!(sorted.len(), list.len());
        }

        #[test]
        fn owners_are_distinct_and_start_with_owner(item: u64, n in 1u32..20, r in 1usize..25) {
            let p = Placement::new((0..n).collect()).unwrap();
            let list = p.owners(item, r);
            prop_assert_eq!(list.len(), r.min(n as usize));
            prop_assert_eq!(list[0], p.owner(item));
            let mut sorted = list.clone();
            sorted.sort_unstable();
            sorted.dedup();
            prop_assert_eq!(sorted.len(), list.len());
        }

        #[test]
        fn id_order_does_not_matter(item: u64, mut ids in proptest::collection::vec(0u32..1000, 1..10)) {
            let a = Placement::new(ids.clone()).unwrap();
            ids.reverse();
            let b = Placement::new(ids).unwrap();
            prop_assert_eq!(a.owner(item), b.owner(item));
        }
    }
}
