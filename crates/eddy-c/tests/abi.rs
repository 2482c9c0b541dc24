//! libeddy's C interface itself, called as a C program calls it (the `extern "C"` functions,
//! raw pointers and all), against real daemons of this host (three): bad handles and bad
//! input give a negative errno and a message, never a crash; batches with mixed results;
//! transfer with progress; several threads on one connection; a deployment that does not
//! answer gives an error within the deadline. No root, no service: the fast lane.

// Test code: its helpers unwrap too (clippy.toml allows it in #[test] functions only).
#![allow(clippy::unwrap_used)]
// Every unsafe block here is one call of the C interface under test, with pointers to live
// locals of the calling test and lengths taken from them, or deliberately bad ones (NULL,
// stale handles) that the interface must refuse: one argument for all of them.
#![allow(
    clippy::undocumented_unsafe_blocks,
    reason = "each block calls the C interface under test with pointers to live locals"
)]

use eddy::*;
use eddy_testkit::{pattern, test_config, Cluster};
use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

fn last_error() -> String {
    // SAFETY: never NULL, valid until the next call on this thread.
    unsafe { CStr::from_ptr(eddy_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn connect(cl: &Cluster) -> eddy_conn_t {
    let state = c(cl.dir.path().to_str().unwrap());
    let mut conn = 0;
    let rc = unsafe { eddy_connect(state.as_ptr(), &mut conn) };
    assert_eq!(rc, 0, "eddy_connect: {}", last_error());
    assert_ne!(conn, 0);
    conn
}

fn open(conn: eddy_conn_t, path: &str, flags: i32) -> eddy_file_t {
    let p = c(path);
    let mut f = 0;
    let rc = unsafe { eddy_open(conn, p.as_ptr(), flags, 0o644, &mut f) };
    assert_eq!(rc, 0, "eddy_open {path}: {}", last_error());
    f
}

fn write(f: eddy_file_t, data: &[u8], off: u64) {
    let n = unsafe { eddy_pwrite(f, data.as_ptr().cast(), data.len(), off) };
    assert_eq!(n, data.len() as i64, "eddy_pwrite: {}", last_error());
}

fn read(f: eddy_file_t, len: usize, off: u64) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let n = unsafe { eddy_pread(f, buf.as_mut_ptr().cast(), len, off) };
    assert!(n >= 0, "eddy_pread: {}", last_error());
    buf.truncate(n as usize);
    buf
}

const RW_CREATE: i32 = libc::O_RDWR | libc::O_CREAT;

/// Three daemons of this host with the test configuration, and a connection to them.
fn deployment() -> (Cluster, eddy_conn_t) {
    deployment_with(test_config())
}

/// Three daemons of this host with `config`, and a connection to them.
fn deployment_with(config: eddy_config::Config) -> (Cluster, eddy_conn_t) {
    let cl = Cluster::start_with(3, config);
    let conn = connect(&cl);
    (cl, conn)
}

#[test]
fn posix_calls_round_trip() {
    let (_cl, conn) = deployment();
    let d = c("/dir");
    assert_eq!(
        unsafe { eddy_mkdir(conn, d.as_ptr(), 0o755) },
        0,
        "{}",
        last_error()
    );
    assert_eq!(
        unsafe { eddy_mkdir(conn, d.as_ptr(), 0o755) },
        -libc::EEXIST
    );
    assert!(last_error().contains("eddy_mkdir"), "{}", last_error());

    // Data across chunks and daemons (64 KiB chunks).
    let data = pattern(1, 0, 300_000);
    let f = open(conn, "/dir/a", RW_CREATE);
    write(f, &data, 0);
    assert_eq!(read(f, 400_000, 0), data);
    assert_eq!(read(f, 10, 300_000), b"");
    assert_eq!(eddy_fsync(f), 0);
    // Advice: accepted for a file that is not linked (nothing to fetch), and the reads go on.
    for advice in [
        libc::POSIX_FADV_WILLNEED,
        libc::POSIX_FADV_SEQUENTIAL,
        libc::POSIX_FADV_RANDOM,
        libc::POSIX_FADV_DONTNEED,
        libc::POSIX_FADV_NORMAL,
    ] {
        assert_eq!(eddy_fadvise(f, 0, 0, advice), 0, "advice {advice}");
    }
    assert_eq!(eddy_fadvise(f, 0, 0, 77), -libc::EINVAL);
    assert!(last_error().contains("eddy_fadvise"), "{}", last_error());
    assert_eq!(
        eddy_fadvise(f, u64::MAX, 1, libc::POSIX_FADV_WILLNEED),
        -libc::EINVAL
    );
    assert_eq!(read(f, 400_000, 0), data);
    let mut st = eddy_stat::default();
    assert_eq!(unsafe { eddy_fstat(f, &mut st) }, 0);
    assert_eq!(st.size, 300_000);
    assert_eq!(st.mode & libc::S_IFMT, libc::S_IFREG);
    assert_eq!(st.mode & 0o777, 0o644);
    assert_eq!(eddy_ftruncate(f, 1000), 0);
    assert_eq!(read(f, 5000, 0), data[..1000]);

    // Locks belong to the handle: a second handle conflicts.
    let g = open(conn, "/dir/a", libc::O_RDWR);
    assert_eq!(
        eddy_lock(f, EDDY_LOCK_WRITE, 0, 100, 0),
        0,
        "{}",
        last_error()
    );
    assert_eq!(eddy_lock(g, EDDY_LOCK_READ, 50, 10, 0), -libc::EAGAIN);
    assert_eq!(eddy_lock(g, EDDY_LOCK_READ, 100, 10, 0), 0);
    assert_eq!(eddy_lock(f, EDDY_LOCK_UNLOCK, 0, 0, 0), 0);
    assert_eq!(
        eddy_lock(g, EDDY_LOCK_WRITE, 0, 0, 0),
        0,
        "{}",
        last_error()
    );
    assert_eq!(eddy_lock(g, 7, 0, 0, 0), -libc::EINVAL);
    assert_eq!(eddy_close(g), 0);
    // Closing g released its lock.
    assert_eq!(
        eddy_lock(f, EDDY_LOCK_WRITE, 0, 0, 0),
        0,
        "{}",
        last_error()
    );
    assert_eq!(eddy_close(f), 0);

    // The namespace.
    let (a, b) = (c("/dir/a"), c("/dir/b"));
    assert_eq!(unsafe { eddy_rename(conn, a.as_ptr(), b.as_ptr()) }, 0);
    assert_eq!(
        unsafe { eddy_stat(conn, a.as_ptr(), &mut st) },
        -libc::ENOENT
    );
    assert!(last_error().contains("/dir/a"), "{}", last_error());
    assert_eq!(unsafe { eddy_stat(conn, b.as_ptr(), &mut st) }, 0);
    assert_eq!(st.size, 1000);
    assert_eq!(unsafe { eddy_truncate(conn, b.as_ptr(), 10) }, 0);
    assert_eq!(unsafe { eddy_stat(conn, b.as_ptr(), &mut st) }, 0);
    assert_eq!(st.size, 10);

    // Extended attributes.
    let (name, value) = (c("user.colour"), b"blue");
    let set = |flags| unsafe {
        eddy_setxattr(
            conn,
            b.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            4,
            flags,
        )
    };
    assert_eq!(set(0), 0, "{}", last_error());
    assert_eq!(set(libc::XATTR_CREATE), -libc::EEXIST);
    assert_eq!(
        unsafe { eddy_getxattr(conn, b.as_ptr(), name.as_ptr(), null_mut(), 0) },
        4
    );
    let mut small = [0u8; 2];
    assert_eq!(
        unsafe {
            eddy_getxattr(
                conn,
                b.as_ptr(),
                name.as_ptr(),
                small.as_mut_ptr().cast(),
                2,
            )
        },
        -(libc::ERANGE as i64)
    );
    let mut buf = [0u8; 64];
    let n = unsafe { eddy_getxattr(conn, b.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 64) };
    assert_eq!(&buf[..n as usize], value);
    let mut list = [0 as c_char; 64];
    let n = unsafe { eddy_listxattr(conn, b.as_ptr(), list.as_mut_ptr(), 64) };
    let bytes: Vec<u8> = list[..n as usize].iter().map(|&x| x as u8).collect();
    assert_eq!(bytes, b"user.colour\0");
    assert_eq!(
        unsafe { eddy_removexattr(conn, b.as_ptr(), name.as_ptr()) },
        0
    );
    assert_eq!(
        unsafe { eddy_getxattr(conn, b.as_ptr(), name.as_ptr(), null_mut(), 0) },
        -(libc::ENODATA as i64)
    );

    // Directory pages: 25 files listed 10 at a time, in name order, each name once.
    for i in 0..25 {
        let f = open(conn, &format!("/dir/f{i:02}"), RW_CREATE | libc::O_EXCL);
        assert_eq!(eddy_close(f), 0);
    }
    let mut names = Vec::new();
    let mut after: Option<CString> = None;
    let mut ents = vec![
        eddy_dirent {
            name: [0; EDDY_NAME_MAX],
            mode: 0,
            reserved: 0,
            ino: 0,
            size: 0
        };
        10
    ];
    loop {
        let n = unsafe {
            eddy_readdir(
                conn,
                d.as_ptr(),
                after.as_ref().map_or(null(), |a| a.as_ptr()),
                ents.as_mut_ptr(),
                10,
            )
        };
        assert!((0..=10).contains(&n), "eddy_readdir: {n} {}", last_error());
        if n == 0 {
            break;
        }
        for e in &ents[..n as usize] {
            let name = unsafe { CStr::from_ptr(e.name.as_ptr()) }.to_str().unwrap();
            assert_eq!(e.mode & libc::S_IFMT, libc::S_IFREG);
            names.push(name.to_string());
        }
        after = Some(c(names.last().unwrap()));
    }
    let mut want: Vec<String> = (0..25).map(|i| format!("f{i:02}")).collect();
    want.push("b".into());
    want.sort();
    assert_eq!(names, want);

    // Removal.
    assert_eq!(unsafe { eddy_rmdir(conn, d.as_ptr()) }, -libc::ENOTEMPTY);
    for n in &want {
        let p = c(&format!("/dir/{n}"));
        assert_eq!(
            unsafe { eddy_unlink(conn, p.as_ptr()) },
            0,
            "{}",
            last_error()
        );
    }
    assert_eq!(
        unsafe { eddy_rmdir(conn, d.as_ptr()) },
        0,
        "{}",
        last_error()
    );
    assert_eq!(eddy_disconnect(conn), 0);
}

#[test]
fn bad_handles_and_bad_input_give_errors_not_crashes() {
    let (_cl, conn) = deployment();
    let f = open(conn, "/f", RW_CREATE);
    let mut buf = [0u8; 16];

    // Never handles, closed handles, handles of another kind.
    for bad in [0u64, 1, u64::MAX, 0xdead_beef_0000_0001] {
        assert_eq!(
            unsafe { eddy_pread(bad, buf.as_mut_ptr().cast(), 16, 0) },
            -(libc::EBADF as i64)
        );
        assert_eq!(eddy_close(bad), -libc::EBADF);
        assert_eq!(eddy_disconnect(bad), -libc::EBADF);
        assert_eq!(eddy_batch_free(bad), -libc::EBADF);
    }
    assert!(last_error().contains("not an open"), "{}", last_error());
    assert_eq!(eddy_close(conn), -libc::EBADF, "a connection is not a file");
    assert_eq!(
        eddy_disconnect(f),
        -libc::EBADF,
        "a file is not a connection"
    );
    assert_eq!(eddy_close(f), 0);
    assert_eq!(eddy_close(f), -libc::EBADF, "closed twice");
    assert_eq!(
        unsafe { eddy_pwrite(f, buf.as_ptr().cast(), 16, 0) },
        -(libc::EBADF as i64)
    );
    // The slot is reused by the next file; the old handle still names nothing.
    let g = open(conn, "/g", RW_CREATE);
    assert_ne!(g, f);
    assert_eq!(eddy_fsync(f), -libc::EBADF);
    assert_eq!(
        eddy_fadvise(f, 0, 0, libc::POSIX_FADV_WILLNEED),
        -libc::EBADF
    );
    assert_eq!(eddy_fsync(g), 0);

    // NULL pointers.
    let mut out = 0u64;
    assert_eq!(
        unsafe { eddy_open(conn, null(), 0, 0, &mut out) },
        -libc::EFAULT
    );
    let p = c("/g");
    assert_eq!(
        unsafe { eddy_open(conn, p.as_ptr(), 0, 0, null_mut()) },
        -libc::EFAULT
    );
    assert_eq!(
        unsafe { eddy_pread(g, null_mut(), 16, 0) },
        -(libc::EFAULT as i64)
    );
    assert_eq!(
        unsafe { eddy_pwrite(g, null(), 16, 0) },
        -(libc::EFAULT as i64)
    );
    assert_eq!(
        unsafe { eddy_pwrite(g, null(), 0, 0) },
        0,
        "an empty write needs no buffer"
    );
    assert_eq!(
        unsafe { eddy_stat(conn, p.as_ptr(), null_mut()) },
        -libc::EFAULT
    );
    assert_eq!(unsafe { eddy_connect(null(), null_mut()) }, -libc::EFAULT);
    assert_eq!(
        unsafe { eddy_batch_submit(conn, null_mut(), 3, &mut out) },
        -libc::EFAULT
    );
    assert_eq!(
        unsafe { eddy_stats_json(conn, null_mut(), 10) },
        -(libc::EFAULT as i64)
    );

    // Bad paths: not UTF-8, relative, missing, too long, a file used as a directory.
    let not_utf8 = CString::new(vec![b'/', 0xff, 0xfe]).unwrap();
    assert_eq!(
        unsafe { eddy_mkdir(conn, not_utf8.as_ptr(), 0o755) },
        -libc::EINVAL
    );
    assert!(last_error().contains("not UTF-8"), "{}", last_error());
    let mut st = eddy_stat::default();
    for (path, errno) in [("/missing/x", libc::ENOENT), ("/g/x", libc::ENOTDIR)] {
        let p = c(path);
        assert_eq!(
            unsafe { eddy_stat(conn, p.as_ptr(), &mut st) },
            -errno,
            "{path}"
        );
    }
    let long = c(&format!("/{}", "n".repeat(300)));
    assert_eq!(
        unsafe { eddy_open(conn, long.as_ptr(), RW_CREATE, 0o644, &mut out) },
        -libc::ENAMETOOLONG
    );
    let rel = c("relative");
    assert!(unsafe { eddy_stat(conn, rel.as_ptr(), &mut st) } < 0);

    // No state directory, a state directory without a deployment.
    let empty = tempfile::tempdir().unwrap();
    let e = c(empty.path().to_str().unwrap());
    assert_eq!(unsafe { eddy_connect(e.as_ptr(), &mut out) }, -libc::ENOENT);
    assert!(last_error().contains("deployment.toml"), "{}", last_error());

    // The error is per thread.
    assert_eq!(unsafe { eddy_connect(e.as_ptr(), &mut out) }, -libc::ENOENT);
    let other = std::thread::spawn(last_error).join().unwrap();
    assert_eq!(other, "");

    // The connection still works, and a closed connection keeps its open files usable.
    write(g, b"still here", 0);
    assert_eq!(eddy_disconnect(conn), 0);
    assert_eq!(eddy_disconnect(conn), -libc::EBADF);
    assert_eq!(
        unsafe { eddy_stat(conn, p.as_ptr(), &mut st) },
        -libc::EBADF
    );
    assert_eq!(read(g, 64, 0), b"still here");
    assert_eq!(eddy_close(g), 0);
}

#[test]
fn a_batch_gives_each_operation_its_own_result() {
    let (_cl, conn) = deployment();
    let a = open(conn, "/a", RW_CREATE);
    let b = open(conn, "/b", RW_CREATE);
    let closed = open(conn, "/c", RW_CREATE);
    assert_eq!(eddy_close(closed), 0);
    let ro = open(conn, "/a", libc::O_RDONLY);
    let one = pattern(2, 0, 200_000);
    let two = pattern(3, 0, 150_000);
    let mut back_a = vec![0u8; 200_000];
    let mut back_b = vec![0u8; 150_000];
    let op = |kind, file, offset, buf: *mut c_void, len| eddy_op {
        kind,
        reserved: 0,
        file,
        offset,
        buf,
        len,
        result: 0,
    };
    let mut ops = vec![
        op(EDDY_OP_WRITE, a, 0, one.as_ptr() as *mut c_void, 200_000),
        op(EDDY_OP_WRITE, b, 0, two.as_ptr() as *mut c_void, 150_000),
        op(EDDY_OP_WRITE, closed, 0, one.as_ptr() as *mut c_void, 10),
        op(EDDY_OP_WRITE, ro, 0, one.as_ptr() as *mut c_void, 10),
        op(99, a, 0, null_mut(), 0),
        op(EDDY_OP_READ, a, 0, null_mut(), 10),
        op(EDDY_OP_SYNC, a, 0, null_mut(), 0),
        op(EDDY_OP_TRUNCATE, b, 100_000, null_mut(), 0),
        op(EDDY_OP_READ, a, 0, back_a.as_mut_ptr().cast(), 200_000),
        op(EDDY_OP_READ, b, 0, back_b.as_mut_ptr().cast(), 150_000),
    ];
    let mut batch = 0;
    let rc = unsafe { eddy_batch_submit(conn, ops.as_mut_ptr(), ops.len(), &mut batch) };
    assert_eq!(rc, 0, "{}", last_error());
    let polled = eddy_batch_poll(batch);
    assert!((0..=ops.len() as i64).contains(&polled));
    assert_eq!(eddy_batch_wait(batch, 60_000), 0, "{}", last_error());
    assert_eq!(eddy_batch_poll(batch), ops.len() as i64);
    assert_eq!(eddy_batch_free(batch), 0);
    assert_eq!(eddy_batch_free(batch), -libc::EBADF);
    let results: Vec<i64> = ops.iter().map(|o| o.result).collect();
    let e = |x: i32| -(x as i64);
    assert_eq!(
        results,
        [
            200_000,
            150_000,
            e(libc::EBADF),
            e(libc::EBADF),
            e(libc::EINVAL),
            e(libc::EFAULT),
            0,
            0,
            200_000,
            100_000
        ]
    );
    assert_eq!(back_a, one);
    assert_eq!(back_b[..100_000], two[..100_000]);

    // Free without waiting: it waits for the operations itself.
    let mut big = vec![0u8; 1 << 20];
    let mut ops = [op(EDDY_OP_READ, a, 0, big.as_mut_ptr().cast(), 1 << 20)];
    assert_eq!(
        unsafe { eddy_batch_submit(conn, ops.as_mut_ptr(), 1, &mut batch) },
        0
    );
    assert_eq!(eddy_batch_free(batch), 0);
    assert_eq!(ops[0].result, 200_000);
    assert_eq!(big[..200_000], one);
    for f in [a, b, ro] {
        assert_eq!(eddy_close(f), 0);
    }
}

#[test]
fn threads_share_one_connection() {
    let (_cl, conn) = deployment();
    let shared = open(conn, "/shared", RW_CREATE);
    const BLK: usize = 100_003;
    let threads: Vec<_> = (0..6u64)
        .map(|t| {
            std::thread::spawn(move || {
                let own = open(conn, &format!("/own{t}"), RW_CREATE);
                for round in 0..5u64 {
                    let data = pattern(t * 100 + round, 0, BLK);
                    write(own, &data, round * BLK as u64);
                    assert_eq!(read(own, BLK, round * BLK as u64), data, "thread {t}");
                }
                let mine = pattern(1000 + t, 0, BLK);
                write(shared, &mine, t * BLK as u64);
                assert_eq!(eddy_close(own), 0);
                t
            })
        })
        .collect();
    for h in threads {
        h.join().expect("a thread failed");
    }
    assert_eq!(eddy_fsync(shared), 0);
    for t in 0..6u64 {
        assert_eq!(read(shared, BLK, t * BLK as u64), pattern(1000 + t, 0, BLK));
        let f = open(conn, &format!("/own{t}"), libc::O_RDONLY);
        for round in 0..5u64 {
            assert_eq!(
                read(f, BLK, round * BLK as u64),
                pattern(t * 100 + round, 0, BLK)
            );
        }
        assert_eq!(eddy_close(f), 0);
    }
    assert_eq!(eddy_close(shared), 0);
    assert_eq!(eddy_disconnect(conn), 0);
}

/// `eddy_transfer` of `paths` in `direction` with `flags`, its progress into `seen` and its
/// results into `results` (none of either: NULL): what it returns.
fn transfer(
    conn: eddy_conn_t,
    direction: i32,
    paths: &[CString],
    flags: u32,
    seen: Option<&mut Seen>,
    results: Option<&mut [eddy_transfer_result]>,
) -> i64 {
    let ptrs: Vec<*const c_char> = paths.iter().map(|p| p.as_ptr()).collect();
    let (cb, user): (eddy_progress_fn, *mut c_void) = match seen {
        Some(seen) => (Some(progress), (seen as *mut Seen).cast()),
        None => (None, null_mut()),
    };
    let (out, max) = match results {
        Some(r) => (r.as_mut_ptr(), r.len()),
        None => (null_mut(), 0),
    };
    unsafe {
        eddy_transfer(
            conn,
            direction,
            ptrs.as_ptr(),
            ptrs.len(),
            flags,
            cb,
            user,
            out,
            max,
        )
    }
}

struct Seen {
    files: Vec<(String, u64, i32)>,
}

unsafe extern "C" fn progress(user: *mut c_void, path: *const c_char, bytes: u64, error: i32) {
    let seen = unsafe { &mut *(user as *mut Seen) };
    let p = unsafe { CStr::from_ptr(path) }
        .to_string_lossy()
        .into_owned();
    seen.files.push((p, bytes, error));
}

#[test]
fn transfer_stages_a_tree_in_and_out_with_progress() {
    let backend = tempfile::tempdir().unwrap();
    std::fs::create_dir(backend.path().join("sub")).unwrap();
    let files = [
        ("one", 100_000usize),
        ("sub/two", 300_000),
        ("sub/three", 1),
    ];
    for (i, (name, len)) in files.iter().enumerate() {
        std::fs::write(backend.path().join(name), pattern(i as u64, 0, *len)).unwrap();
    }
    let mut config = test_config();
    config.links.push(eddy_config::Link {
        prefix: "/in".into(),
        backend: backend.path().to_path_buf(),
    });
    let (_cl, conn) = deployment_with(config);

    let mut seen = Seen { files: Vec::new() };
    let paths = [c("/in"), c("/nowhere")];
    let mut results = vec![
        eddy_transfer_result {
            path: [0; EDDY_PATH_MAX],
            bytes: 0,
            error: 0,
            reserved: 0
        };
        8
    ];
    let n = transfer(
        conn,
        EDDY_STAGE_IN,
        &paths,
        EDDY_TRANSFER_PIN,
        Some(&mut seen),
        Some(&mut results),
    );
    assert_eq!(n, 4, "three files and one failure: {}", last_error());
    assert!(last_error().contains("/nowhere"), "{}", last_error());
    let mut got: Vec<(String, u64, i32)> = results[..4]
        .iter()
        .map(|r| {
            let p = unsafe { CStr::from_ptr(r.path.as_ptr()) };
            (p.to_string_lossy().into_owned(), r.bytes, r.error)
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("/in/one".to_string(), 100_000, 0),
            ("/in/sub/three".to_string(), 1, 0),
            ("/in/sub/two".to_string(), 300_000, 0),
            ("/nowhere".to_string(), 0, -libc::EIO),
        ]
    );
    let mut progressed = seen.files.clone();
    progressed.sort();
    assert_eq!(progressed, got, "progress saw every file as it ended");

    // Through the namespace: the data is there; a new file goes out to the backend.
    let f = open(conn, "/in/sub/two", libc::O_RDONLY);
    assert_eq!(read(f, 300_000, 0), pattern(1, 0, 300_000));
    assert_eq!(eddy_close(f), 0);
    let g = open(conn, "/in/sub/new", RW_CREATE);
    write(g, &pattern(9, 0, 70_000), 0);
    assert_eq!(eddy_close(g), 0);
    seen.files.clear();
    let out = [c("/in/sub")];
    let n = transfer(
        conn,
        EDDY_STAGE_OUT,
        &out,
        0,
        Some(&mut seen),
        Some(&mut results),
    );
    assert!(n >= 1, "eddy_transfer out: {n} {}", last_error());
    assert!(
        seen.files
            .iter()
            .any(|(p, _, e)| p == "/in/sub/new" && *e == 0),
        "{:?}",
        seen.files
    );
    assert_eq!(
        std::fs::read(backend.path().join("sub/new")).unwrap(),
        pattern(9, 0, 70_000)
    );

    // A bad direction or flags, and a NULL callback (no progress wanted).
    let rc = transfer(conn, 5, &out, 0, None, None);
    assert_eq!(rc, -(libc::EINVAL as i64));
    let rc = transfer(conn, EDDY_STAGE_IN, &out, 0x80, None, None);
    assert_eq!(rc, -(libc::EINVAL as i64));
    let rc = transfer(conn, EDDY_STAGE_IN, &out, 0, None, None);
    assert!(rc >= 1, "{}", last_error());
    assert_eq!(eddy_disconnect(conn), 0);
}

#[test]
fn stats_are_what_eddy_stats_json_prints() {
    let (cl, conn) = deployment();
    let f = open(conn, "/counted", RW_CREATE);
    write(f, &pattern(4, 0, 500_000), 0);
    assert_eq!(eddy_close(f), 0);
    let len = unsafe { eddy_stats_json(conn, null_mut(), 0) };
    assert!(len > 2, "{}", last_error());
    let mut small = vec![0 as c_char; 8];
    let n = unsafe { eddy_stats_json(conn, small.as_mut_ptr(), 8) };
    assert!(n >= 8, "too small: the length, as snprintf");
    assert_eq!(small[7], 0, "cut and terminated");
    let mut buf = vec![0 as c_char; len as usize + 4096];
    let n = unsafe { eddy_stats_json(conn, buf.as_mut_ptr(), buf.len()) };
    assert!(n > 0 && (n as usize) < buf.len());
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap();
    let v: serde_json::Value = serde_json::from_str(text).unwrap();
    let daemons = v.as_array().expect("an array of snapshots");
    assert_eq!(daemons.len(), 3);
    let ids: Vec<u64> = daemons
        .iter()
        .map(|d| d["daemon"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [0, 1, 2]);
    // Every byte written is counted by some daemon.
    let written: u64 = daemons
        .iter()
        .flat_map(|d| d["clients"].as_array().unwrap())
        .map(|c| c["written_bytes"].as_u64().unwrap())
        .sum();
    assert!(written >= 500_000, "{written} bytes counted");
    // The same text `eddy stats --json` prints.
    let out = std::process::Command::new(eddy_testkit::eddy_bin())
        .args(["stats", "--json", "--state"])
        .arg(cl.dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        cli.as_array().unwrap().len(),
        daemons.len(),
        "the same daemons"
    );
    for (a, b) in cli.as_array().unwrap().iter().zip(daemons) {
        let mut a = a.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        let mut b = b.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        a.sort();
        b.sort();
        assert_eq!(a, b, "the same fields");
    }
    assert_eq!(eddy_disconnect(conn), 0);
}

#[test]
fn an_unreachable_deployment_is_an_error_within_the_deadline() {
    let (mut cl, conn) = deployment();
    let f = open(conn, "/x", RW_CREATE);
    for i in 0..3 {
        cl.kill(i);
    }
    let start = Instant::now();
    let mut out = 0;
    let state = c(cl.dir.path().to_str().unwrap());
    let rc = unsafe { eddy_connect(state.as_ptr(), &mut out) };
    assert!(rc < 0, "connected to dead daemons");
    assert!(!last_error().is_empty());
    let data = [1u8; 1000];
    let n = unsafe { eddy_pwrite(f, data.as_ptr().cast(), 1000, 0) };
    assert!(n < 0, "wrote to dead daemons");
    assert!(last_error().contains("eddy_pwrite"), "{}", last_error());
    let mut st = eddy_stat::default();
    let p = c("/x");
    assert!(unsafe { eddy_stat(conn, p.as_ptr(), &mut st) } < 0);
    let len = unsafe { eddy_stats_json(conn, null_mut(), 0) };
    assert!(len < 0);
    assert!(last_error().contains("no daemon"), "{}", last_error());
    assert!(
        start.elapsed() < Duration::from_secs(120),
        "did not hang past 120 s"
    );
    // Closing still frees the handle.
    let _ = eddy_close(f);
    assert_eq!(eddy_close(f), -libc::EBADF);
    assert_eq!(eddy_disconnect(conn), 0);
}
