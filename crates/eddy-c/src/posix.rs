//! The POSIX set: open and close, pread and pwrite, fsync, stat, the namespace, directory
//! pages, extended attributes and byte-range locks, each the client's own call.

use crate::handles;
use crate::run::Conn;
use crate::{call, call_int, put, str_arg, R};
use eddy_client::{
    Creds, DirEntry, Errno, File, Inode, LockKind, LockRange, LockRequest, XattrSet,
};
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

/// The longest name an `eddy_dirent` holds, its NUL included.
pub const EDDY_NAME_MAX: usize = 256;

/// A shared lock (`eddy_lock`), as F_RDLCK.
pub const EDDY_LOCK_READ: i32 = 0;
/// An exclusive lock (`eddy_lock`), as F_WRLCK.
pub const EDDY_LOCK_WRITE: i32 = 1;
/// Releases the range (`eddy_lock`), as F_UNLCK.
pub const EDDY_LOCK_UNLOCK: i32 = 2;

/// What `eddy_stat` and `eddy_fstat` fill in. `mode` holds the type bits (S_IFREG,
/// S_IFDIR, ...) and the permission bits, as `st_mode`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct eddy_stat {
    pub ino: u64,
    pub size: u64,
    /// 512-byte blocks.
    pub blocks: u64,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime_sec: i64,
    pub mtime_sec: i64,
    pub ctime_sec: i64,
    pub atime_nsec: u32,
    pub mtime_nsec: u32,
    pub ctime_nsec: u32,
    pub reserved: u32,
}

/// One entry of `eddy_readdir`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct eddy_dirent {
    /// NUL-terminated.
    pub name: [c_char; EDDY_NAME_MAX],
    /// Type and permission bits, as `st_mode`.
    pub mode: u32,
    pub reserved: u32,
    pub ino: u64,
    pub size: u64,
}

/// An open file: the client's `File` and the connection it came through.
pub(crate) struct OpenFile {
    pub(crate) conn: Arc<Conn>,
    pub(crate) file: File,
    /// This file's handle: the owner of the locks taken through it (as an OFD lock).
    pub(crate) handle: std::sync::OnceLock<u64>,
}

fn to_stat(i: &Inode) -> eddy_stat {
    eddy_stat {
        ino: i.st_ino(),
        size: i.size,
        blocks: i.size.div_ceil(512),
        mode: i.st_mode(),
        nlink: i.st_nlink(),
        uid: i.uid,
        gid: i.gid,
        atime_sec: i.atime.sec,
        atime_nsec: i.atime.nsec,
        mtime_sec: i.mtime.sec,
        mtime_nsec: i.mtime.nsec,
        ctime_sec: i.ctime.sec,
        ctime_nsec: i.ctime.nsec,
        reserved: 0,
    }
}

fn creds() -> Creds {
    Creds::current()
}

/// A buffer argument: NULL is EFAULT unless it is empty.
///
/// # Safety
/// `p` points at `len` readable bytes, or `len` is 0.
pub(crate) unsafe fn bytes<'a>(p: *const c_void, len: usize, name: &str) -> R<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Errno::new(libc::EFAULT, format!("{name} is NULL")));
    }
    if len > isize::MAX as usize {
        return Err(Errno::einval(format!("{name}: length {len} too large")));
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts(p.cast(), len) })
}

/// A writable buffer argument: NULL is EFAULT unless it is empty.
///
/// # Safety
/// `p` points at `len` writable bytes, or `len` is 0.
pub(crate) unsafe fn bytes_mut<'a>(p: *mut c_void, len: usize, name: &str) -> R<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Errno::new(libc::EFAULT, format!("{name} is NULL")));
    }
    if len > isize::MAX as usize {
        return Err(Errno::einval(format!("{name}: length {len} too large")));
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast(), len) })
}

/// Runs a namespace call of `conn` on `path`.
fn with_path<T: Send + 'static, Fut>(
    conn: crate::eddy_conn_t,
    path: *const c_char,
    f: impl FnOnce(eddy_client::Client, String) -> Fut,
) -> R<T>
where
    Fut: std::future::Future<Output = R<T>> + Send + 'static,
{
    let c = handles::conn(conn)?;
    // SAFETY: the caller's promise (every such call takes a NUL-terminated path).
    let p = unsafe { str_arg(path, "path") }?.to_string();
    c.run(f(c.client.clone(), p))
}

/// Opens (with O_CREAT: creates) the file `path` of the namespace, with open(2)'s `flags`
/// (O_RDONLY, O_WRONLY, O_RDWR, O_CREAT, O_EXCL, O_TRUNC, O_APPEND) and `mode` for a new
/// file (the process's umask is not applied). On success `*out` is the file's handle.
/// Blocks for a few requests (each within `rpc_timeout_ms`).
///
/// Errors as open(2): -ENOENT, -EEXIST, -EACCES, -EISDIR, -ENAMETOOLONG, ...; -EBADF (a bad
/// connection handle), -EFAULT (a NULL pointer), -EINVAL (path not UTF-8), -EIO (daemons).
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` points at an `eddy_file_t`.
#[no_mangle]
pub unsafe extern "C" fn eddy_open(
    conn: crate::eddy_conn_t,
    path: *const c_char,
    flags: c_int,
    mode: u32,
    out: *mut crate::eddy_file_t,
) -> i32 {
    call_int("eddy_open", || {
        if out.is_null() {
            return Err(Errno::new(libc::EFAULT, "out is NULL"));
        }
        let c = handles::conn(conn)?;
        let file = with_path(conn, path, move |cl, p| async move {
            cl.open(&p, flags, mode, creds()).await
        })?;
        let of = Arc::new(OpenFile {
            conn: c,
            file,
            handle: std::sync::OnceLock::new(),
        });
        let h = handles::insert(handles::Obj::File(of.clone()))?;
        let _ = of.handle.set(h);
        // SAFETY: checked above, the caller's promise.
        unsafe { put(out, h, "out") }?;
        Ok(0)
    })
}

/// Closes the file: publishes the size its writes reached (close-to-open), releases the
/// locks taken through it; the handle is invalid from now on (a second close is -EBADF).
/// Blocks for one or two requests.
#[no_mangle]
pub extern "C" fn eddy_close(file: crate::eddy_file_t) -> i32 {
    call_int("eddy_close", || {
        let of = handles::remove_file(file)?;
        let (cl, f) = (of.conn.client.clone(), of.file.clone());
        of.conn.run(async move {
            let released = cl.release_locks(&f, None, Some(file)).await;
            cl.close(&f).await?;
            released
        })?;
        Ok(0)
    })
}

/// Reads up to `len` bytes at `offset` into `buf`; the count read (0 at the end of the
/// file), or a negative errno (-EBADF: not open for reading, or a bad handle). Blocks for
/// the requests to the daemons holding the range, sent at once (each within
/// `rpc_timeout_ms`).
///
/// # Safety
/// `buf` points at `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn eddy_pread(
    file: crate::eddy_file_t,
    buf: *mut c_void,
    len: usize,
    offset: u64,
) -> i64 {
    call("eddy_pread", || {
        let of = handles::file(file)?;
        // SAFETY: the caller's promise.
        let buf = unsafe { bytes_mut(buf, len, "buf") }?;
        let cl = of.conn.client.clone();
        let n = match of
            .conn
            .run_here(async { cl.pread_into(&of.file, offset, buf).await })
        {
            Some(r) => r?,
            None => {
                let (cl, f) = (cl.clone(), of.file.clone());
                let data = of
                    .conn
                    .run(async move { cl.pread(&f, offset, len).await })?;
                buf[..data.len()].copy_from_slice(&data);
                data.len()
            }
        };
        Ok(n as i64)
    })
}

/// Writes `len` bytes of `buf` at `offset` (O_APPEND: at the end); the count written, or a
/// negative errno. Blocks for the requests to the daemons holding the range, sent at once.
///
/// # Safety
/// `buf` points at `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn eddy_pwrite(
    file: crate::eddy_file_t,
    buf: *const c_void,
    len: usize,
    offset: u64,
) -> i64 {
    call("eddy_pwrite", || {
        let of = handles::file(file)?;
        // SAFETY: the caller's promise.
        let data = unsafe { bytes(buf, len, "buf") }?;
        let cl = of.conn.client.clone();
        let n = match of
            .conn
            .run_here(async { cl.pwrite(&of.file, offset, data).await })
        {
            Some(r) => r?,
            None => {
                let (cl, f, d) = (cl.clone(), of.file.clone(), data.to_vec());
                of.conn
                    .run(async move { cl.pwrite(&f, offset, &d).await })?
            }
        };
        Ok(n as i64)
    })
}

/// Makes the file's data and size durable on the daemons (as fsync(2)). Blocks until every
/// daemon written to has synced (within `rpc_timeout_ms` each).
#[no_mangle]
pub extern "C" fn eddy_fsync(file: crate::eddy_file_t) -> i32 {
    call_int("eddy_fsync", || {
        let of = handles::file(file)?;
        let (cl, f) = (of.conn.client.clone(), of.file.clone());
        of.conn.run(async move { cl.fsync(&f).await })?;
        Ok(0)
    })
}

/// How the program will read `len` bytes at `offset` of the open file (`len` 0: to its end),
/// with `advice` one of `POSIX_FADV_*` (as posix_fadvise(2)): `POSIX_FADV_WILLNEED` starts a
/// background fetch of a file of a linked prefix from the backend into the cache and returns
/// at once; `POSIX_FADV_SEQUENTIAL` and `POSIX_FADV_RANDOM` turn the handle's read-ahead on
/// for every read and off; the others change nothing. Does not block on the backend.
#[no_mangle]
pub extern "C" fn eddy_fadvise(
    file: crate::eddy_file_t,
    offset: u64,
    len: u64,
    advice: i32,
) -> i32 {
    call_int("eddy_fadvise", || {
        let of = handles::file(file)?;
        let advice = eddy_client::Advice::from_posix(advice)?;
        let (cl, f) = (of.conn.client.clone(), of.file.clone());
        of.conn
            .run(async move { cl.advise(&f, offset, len, advice).await })?;
        Ok(0)
    })
}

/// Sets the size of the open file (open for writing) to `size`. One or two requests.
#[no_mangle]
pub extern "C" fn eddy_ftruncate(file: crate::eddy_file_t, size: u64) -> i32 {
    call_int("eddy_ftruncate", || {
        let of = handles::file(file)?;
        let (cl, f) = (of.conn.client.clone(), of.file.clone());
        of.conn.run(async move { cl.ftruncate(&f, size).await })?;
        Ok(0)
    })
}

/// The attributes of the open file. One request.
///
/// # Safety
/// `out` points at an `eddy_stat`.
#[no_mangle]
pub unsafe extern "C" fn eddy_fstat(file: crate::eddy_file_t, out: *mut eddy_stat) -> i32 {
    call_int("eddy_fstat", || {
        if out.is_null() {
            return Err(Errno::new(libc::EFAULT, "out is NULL"));
        }
        let of = handles::file(file)?;
        let (cl, f) = (of.conn.client.clone(), of.file.clone());
        let i = of.conn.run(async move { cl.fstat(&f).await })?;
        // SAFETY: checked above, the caller's promise.
        unsafe { put(out, to_stat(&i), "out") }?;
        Ok(0)
    })
}

/// The attributes of `path` (symbolic links followed). One request or a few.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` points at an `eddy_stat`.
#[no_mangle]
pub unsafe extern "C" fn eddy_stat(
    conn: crate::eddy_conn_t,
    path: *const c_char,
    out: *mut eddy_stat,
) -> i32 {
    call_int("eddy_stat", || {
        if out.is_null() {
            return Err(Errno::new(libc::EFAULT, "out is NULL"));
        }
        let i = with_path(conn, path, |cl, p| async move { cl.stat(&p).await })?;
        // SAFETY: checked above, the caller's promise.
        unsafe { put(out, to_stat(&i), "out") }?;
        Ok(0)
    })
}

/// Makes the directory `path` with permission bits `mode`. A few requests.
///
/// # Safety
/// `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn eddy_mkdir(
    conn: crate::eddy_conn_t,
    path: *const c_char,
    mode: u32,
) -> i32 {
    call_int("eddy_mkdir", || {
        with_path(conn, path, move |cl, p| async move {
            cl.mkdir(&p, mode, creds()).await
        })?;
        Ok(0)
    })
}

/// Removes the name `path` (not a directory). A few requests.
///
/// # Safety
/// `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn eddy_unlink(conn: crate::eddy_conn_t, path: *const c_char) -> i32 {
    call_int("eddy_unlink", || {
        with_path(
            conn,
            path,
            |cl, p| async move { cl.unlink(&p, creds()).await },
        )?;
        Ok(0)
    })
}

/// Removes the empty directory `path`. A request per daemon (each holds some children).
///
/// # Safety
/// `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn eddy_rmdir(conn: crate::eddy_conn_t, path: *const c_char) -> i32 {
    call_int("eddy_rmdir", || {
        with_path(
            conn,
            path,
            |cl, p| async move { cl.rmdir(&p, creds()).await },
        )?;
        Ok(0)
    })
}

/// Renames `from` to `to` (as rename(2), directories included: a directory's rename moves
/// its whole subtree and takes a request per entry under it).
///
/// # Safety
/// `from` and `to` are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn eddy_rename(
    conn: crate::eddy_conn_t,
    from: *const c_char,
    to: *const c_char,
) -> i32 {
    call_int("eddy_rename", || {
        // SAFETY: the caller's promise.
        let to = unsafe { str_arg(to, "to") }?.to_string();
        with_path(conn, from, move |cl, p| async move {
            cl.rename(&p, &to, creds()).await
        })?;
        Ok(0)
    })
}

/// Sets the size of the file `path` to `size`. One or two requests.
///
/// # Safety
/// `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn eddy_truncate(
    conn: crate::eddy_conn_t,
    path: *const c_char,
    size: u64,
) -> i32 {
    call_int("eddy_truncate", || {
        with_path(conn, path, move |cl, p| async move {
            cl.truncate(&p, size, creds()).await
        })?;
        Ok(0)
    })
}

/// Lists the directory `path` in pages: up to `max` entries, in byte order of their names,
/// starting after the name `after` (NULL: from the start), into `entries`. Returns the
/// count (0: the end); the next page starts after the last name returned. Memory and
/// requests are bounded by `max` (and the deployment's `readdir_page`), whatever the size
/// of the directory. A name longer than `EDDY_NAME_MAX - 1` bytes is -ENAMETOOLONG.
///
/// # Safety
/// `path` is a NUL-terminated string, `after` NULL or one; `entries` points at `max`
/// writable `eddy_dirent`s.
#[no_mangle]
pub unsafe extern "C" fn eddy_readdir(
    conn: crate::eddy_conn_t,
    path: *const c_char,
    after: *const c_char,
    entries: *mut eddy_dirent,
    max: usize,
) -> i64 {
    call("eddy_readdir", || {
        let after = if after.is_null() {
            None
        } else {
            // SAFETY: the caller's promise.
            Some(unsafe { str_arg(after, "after") }?.to_string())
        };
        if entries.is_null() && max > 0 {
            return Err(Errno::new(libc::EFAULT, "entries is NULL"));
        }
        let page: Vec<DirEntry> = with_path(conn, path, move |cl, p| async move {
            let mut r = cl.readdir(&p, after)?;
            let mut out = Vec::new();
            while out.len() < max {
                match r.next_page().await? {
                    Some(mut page) => out.append(&mut page),
                    None => break,
                }
            }
            out.truncate(max);
            Ok(out)
        })?;
        for (k, e) in page.iter().enumerate() {
            let name = e.name.as_bytes();
            if name.len() >= EDDY_NAME_MAX {
                return Err(Errno::new(
                    libc::ENAMETOOLONG,
                    format!("{}: longer than EDDY_NAME_MAX - 1 bytes", e.name),
                ));
            }
            let mut d = eddy_dirent {
                name: [0; EDDY_NAME_MAX],
                mode: e.inode.st_mode(),
                reserved: 0,
                ino: e.inode.st_ino(),
                size: e.inode.size,
            };
            for (to, from) in d.name.iter_mut().zip(name) {
                *to = *from as c_char;
            }
            // SAFETY: `entries` holds `max` entries and k < max.
            unsafe { entries.add(k).write(d) };
        }
        Ok(page.len() as i64)
    })
}

/// Copies `value` into `buf` as getxattr(2) does: with `size` 0 only the length is
/// returned; a buffer too small is -ERANGE.
fn give(value: &[u8], buf: *mut c_void, size: usize) -> R<i64> {
    if size == 0 {
        return Ok(value.len() as i64);
    }
    if value.len() > size {
        return Err(Errno::new(
            libc::ERANGE,
            format!("{} bytes do not fit in {size}", value.len()),
        ));
    }
    // SAFETY: the caller's promise: `buf` holds `size` bytes.
    let out = unsafe { bytes_mut(buf, size, "buf") }?;
    out[..value.len()].copy_from_slice(value);
    Ok(value.len() as i64)
}

/// The value of the extended attribute `name` of `path`, as getxattr(2): its length, with
/// `size` 0 the length alone; -ENODATA when absent, -ERANGE when `size` is too small.
///
/// # Safety
/// `path` and `name` are NUL-terminated strings; `buf` points at `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn eddy_getxattr(
    conn: crate::eddy_conn_t,
    path: *const c_char,
    name: *const c_char,
    buf: *mut c_void,
    size: usize,
) -> i64 {
    call("eddy_getxattr", || {
        // SAFETY: the caller's promise.
        let name = unsafe { str_arg(name, "name") }?.to_string();
        let v = with_path(conn, path, move |cl, p| async move {
            cl.getxattr(&p, &name, creds()).await
        })?;
        give(&v, buf, size)
    })
}

/// Sets the extended attribute `name` of `path` to the `size` bytes of `value`; `flags` 0,
/// XATTR_CREATE (-EEXIST when present) or XATTR_REPLACE (-ENODATA when absent).
///
/// # Safety
/// `path` and `name` are NUL-terminated strings; `value` points at `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn eddy_setxattr(
    conn: crate::eddy_conn_t,
    path: *const c_char,
    name: *const c_char,
    value: *const c_void,
    size: usize,
    flags: c_int,
) -> i32 {
    call_int("eddy_setxattr", || {
        // SAFETY: the caller's promise.
        let name = unsafe { str_arg(name, "name") }?.to_string();
        // SAFETY: the caller's promise.
        let value = unsafe { bytes(value, size, "value") }?.to_vec();
        let how = match flags {
            0 => XattrSet::Any,
            libc::XATTR_CREATE => XattrSet::Create,
            libc::XATTR_REPLACE => XattrSet::Replace,
            f => return Err(Errno::einval(format!("flags {f:#x}"))),
        };
        with_path(conn, path, move |cl, p| async move {
            cl.setxattr(&p, &name, &value, how, creds()).await
        })?;
        Ok(0)
    })
}

/// The names of the extended attributes of `path`, each NUL-terminated, one after the
/// other, as listxattr(2): their total length, with `size` 0 the length alone.
///
/// # Safety
/// `path` is a NUL-terminated string; `buf` points at `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn eddy_listxattr(
    conn: crate::eddy_conn_t,
    path: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> i64 {
    call("eddy_listxattr", || {
        let names = with_path(conn, path, |cl, p| async move {
            cl.listxattr(&p, creds()).await
        })?;
        let mut list = Vec::new();
        for n in names {
            list.extend_from_slice(n.as_bytes());
            list.push(0);
        }
        give(&list, buf.cast(), size)
    })
}

/// Removes the extended attribute `name` of `path` (-ENODATA when absent).
///
/// # Safety
/// `path` and `name` are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn eddy_removexattr(
    conn: crate::eddy_conn_t,
    path: *const c_char,
    name: *const c_char,
) -> i32 {
    call_int("eddy_removexattr", || {
        // SAFETY: the caller's promise.
        let name = unsafe { str_arg(name, "name") }?.to_string();
        with_path(conn, path, move |cl, p| async move {
            cl.removexattr(&p, &name, creds()).await
        })?;
        Ok(0)
    })
}

/// Takes (`EDDY_LOCK_READ`, `EDDY_LOCK_WRITE`) or releases (`EDDY_LOCK_UNLOCK`) the advisory
/// lock on `len` bytes at `start` (`len` 0: to the end of any file) through the open file.
/// Locks belong to the file handle (as open file description locks): two handles conflict,
/// even in one process; closing the handle releases its locks. Without `wait`, a conflict is
/// -EAGAIN at once; with `wait`, the call blocks until the lock is granted, however long
/// (a deadlock between waiters is -EDEADLK).
#[no_mangle]
pub extern "C" fn eddy_lock(
    file: crate::eddy_file_t,
    kind: c_int,
    start: u64,
    len: u64,
    wait: c_int,
) -> i32 {
    call_int("eddy_lock", || {
        let of = handles::file(file)?;
        let kind = match kind {
            EDDY_LOCK_READ => LockKind::Read,
            EDDY_LOCK_WRITE => LockKind::Write,
            EDDY_LOCK_UNLOCK => LockKind::Unlock,
            k => return Err(Errno::einval(format!("lock kind {k}"))),
        };
        let end = match len {
            0 => u64::MAX,
            l => start
                .checked_add(l - 1)
                .ok_or_else(|| Errno::einval("start + len overflows"))?,
        };
        let req = LockRequest {
            owner: file,
            handle: file,
            pid: std::process::id(),
            kind,
            range: LockRange { start, end },
        };
        let (cl, f) = (of.conn.client.clone(), of.file.clone());
        of.conn
            .run(async move { cl.lock(&f, &req, wait != 0).await })?;
        Ok(0)
    })
}
