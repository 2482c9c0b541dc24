//! The handle table: every object a C program holds is a slot number and that slot's
//! generation, so a handle of a closed object (its slot since reused or not) is told apart
//! from a live one and is EBADF, never a use of freed memory.

use crate::R;
use eddy_client::Errno;
use std::sync::{Arc, Mutex, MutexGuard};

/// What a handle names.
#[derive(Clone)]
pub(crate) enum Obj {
    Conn(Arc<crate::run::Conn>),
    File(Arc<crate::posix::OpenFile>),
    Batch(Arc<crate::batch::Batch>),
}

impl Obj {
    fn kind(&self) -> &'static str {
        match self {
            Obj::Conn(_) => "connection",
            Obj::File(_) => "file",
            Obj::Batch(_) => "batch",
        }
    }
}

struct Slot {
    generation: u32,
    obj: Option<Obj>,
}

#[derive(Default)]
struct Table {
    slots: Vec<Slot>,
    free: Vec<usize>,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    slots: Vec::new(),
    free: Vec::new(),
});

fn table() -> MutexGuard<'static, Table> {
    // A panic while holding the lock leaves the table consistent (every change is one
    // assignment), so a poisoned lock is taken as it is.
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Handles are `generation << 32 | (slot + 1)`: never 0.
fn handle(slot: usize, generation: u32) -> u64 {
    (u64::from(generation) << 32) | (slot as u64 + 1)
}

fn split(h: u64) -> Option<(usize, u32)> {
    let slot = (h & 0xffff_ffff) as usize;
    (slot > 0).then(|| (slot - 1, (h >> 32) as u32))
}

/// Puts `obj` in the table; its new handle.
pub(crate) fn insert(obj: Obj) -> R<u64> {
    let mut t = table();
    if let Some(i) = t.free.pop() {
        let s = &mut t.slots[i];
        s.obj = Some(obj);
        return Ok(handle(i, s.generation));
    }
    if t.slots.len() >= u32::MAX as usize - 1 {
        return Err(Errno::new(libc::EMFILE, "too many open handles"));
    }
    t.slots.push(Slot {
        generation: 1,
        obj: Some(obj),
    });
    Ok(handle(t.slots.len() - 1, 1))
}

fn bad(h: u64, kind: &str) -> Errno {
    Errno::new(
        libc::EBADF,
        format!("{h:#x} is not an open {kind} handle (closed, or never one)"),
    )
}

fn lookup(h: u64, kind: &str) -> R<Obj> {
    let t = table();
    let (i, g) = split(h).ok_or_else(|| bad(h, kind))?;
    match t.slots.get(i) {
        Some(Slot {
            generation,
            obj: Some(o),
        }) if *generation == g && o.kind() == kind => Ok(o.clone()),
        _ => Err(bad(h, kind)),
    }
}

/// Takes the object out of the table: its handle is invalid from now on (the slot's
/// generation moves on), whoever still holds it.
fn remove(h: u64, kind: &str) -> R<Obj> {
    let mut t = table();
    let (i, g) = split(h).ok_or_else(|| bad(h, kind))?;
    let s = match t.slots.get_mut(i) {
        Some(s) if s.generation == g && s.obj.as_ref().is_some_and(|o| o.kind() == kind) => s,
        _ => return Err(bad(h, kind)),
    };
    let o = s.obj.take().ok_or_else(|| bad(h, kind))?;
    s.generation = s.generation.wrapping_add(1).max(1);
    t.free.push(i);
    Ok(o)
}

pub(crate) fn conn(h: u64) -> R<Arc<crate::run::Conn>> {
    match lookup(h, "connection")? {
        Obj::Conn(c) => Ok(c),
        _ => Err(bad(h, "connection")),
    }
}

pub(crate) fn file(h: u64) -> R<Arc<crate::posix::OpenFile>> {
    match lookup(h, "file")? {
        Obj::File(f) => Ok(f),
        _ => Err(bad(h, "file")),
    }
}

pub(crate) fn batch(h: u64) -> R<Arc<crate::batch::Batch>> {
    match lookup(h, "batch")? {
        Obj::Batch(b) => Ok(b),
        _ => Err(bad(h, "batch")),
    }
}

pub(crate) fn remove_conn(h: u64) -> R<Arc<crate::run::Conn>> {
    match remove(h, "connection")? {
        Obj::Conn(c) => Ok(c),
        _ => Err(bad(h, "connection")),
    }
}

pub(crate) fn remove_file(h: u64) -> R<Arc<crate::posix::OpenFile>> {
    match remove(h, "file")? {
        Obj::File(f) => Ok(f),
        _ => Err(bad(h, "file")),
    }
}

pub(crate) fn remove_batch(h: u64) -> R<Arc<crate::batch::Batch>> {
    match remove(h, "batch")? {
        Obj::Batch(b) => Ok(b),
        _ => Err(bad(h, "batch")),
    }
}
