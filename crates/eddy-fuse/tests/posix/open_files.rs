//! A file unlinked, or replaced by a rename, while a descriptor holds it open stays usable
//! through that descriptor (fstat, reads, writes, fsync) until the last close, and its data is
//! freed then (decision 0061): through the preload library and through the client library
//! used directly. The mount's cases are `corners.rs` and `mount_ops.rs`.

use crate::corners::RENAME_OVER_OPEN_PY;
use crate::script_runs::{python, PREFIX};
use eddy_client::{Client, Creds};
use eddy_testkit::Mounted;
use std::collections::BTreeSet;
use std::path::Path;

/// A file of several chunks held open, unlinked, then used through its descriptor.
const UNLINK_OPEN_PY: &str = r#"
import os, sys
d = sys.argv[1]
fd = os.open(f"{d}/gone", os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"x" * 300000)
os.unlink(f"{d}/gone")
print("exists", os.path.exists(f"{d}/gone"))
st = os.fstat(fd)
print("fstat", st.st_size, st.st_nlink)
os.pwrite(fd, b"tail", 300000)
os.fsync(fd)
print("pread", os.pread(fd, 6, 299998).decode())
print("size", os.fstat(fd).st_size)
print("listed", sorted(os.listdir(d)))
os.close(fd)
print("after close", sorted(os.listdir(d)))
"#;

/// A file unlinked while open, and the process exits without closing it (`tmpfile()`'s way).
const UNLINK_THEN_EXIT_PY: &str = r#"
import os, sys
d = sys.argv[1]
fd = os.open(f"{d}/scratch", os.O_RDWR | os.O_CREAT, 0o644)
os.unlink(f"{d}/scratch")
os.write(fd, b"y" * 200000)
os._exit(0)
"#;

/// The names in `dir` as the client library lists them (hidden names included).
fn lib_names(lib: &Client, rt: &tokio::runtime::Runtime, dir: &str) -> Vec<String> {
    rt.block_on(async {
        let mut rd = lib.readdir(dir, None).unwrap();
        let mut out = Vec::new();
        while let Some(page) = rd.next_page().await.unwrap() {
            out.extend(page.into_iter().map(|e| e.name));
        }
        out.sort();
        out
    })
}

/// The file ids whose data files lie in the daemons' roots (chunk data, not checksums).
fn data_file_ids(m: &Mounted) -> BTreeSet<u128> {
    fn walk(dir: &Path, out: &mut BTreeSet<u128>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if let Some(name) = p.file_name().and_then(|n| n.to_str()) {
                if name.len() == 32 {
                    if let Ok(id) = u128::from_str_radix(name, 16) {
                        out.insert(id);
                    }
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    for i in 0..m.cluster.dep.daemons.len() {
        walk(m.cluster.root_of(i), &mut out);
    }
    out
}

/// Every data file on the daemons belongs to one of `live` (paths in the namespace): what
/// was unlinked or replaced is gone once closed. Waits a little for removals under way.
fn only_data_of(m: &Mounted, lib: &Client, rt: &tokio::runtime::Runtime, live: &[&str]) {
    let ids: BTreeSet<u128> = live
        .iter()
        .map(|p| rt.block_on(lib.stat(p)).unwrap().file_id)
        .collect();
    eddy_testkit::eventually::eventually_seen(
        std::time::Duration::from_secs(10),
        "the data files of removed files go from the daemons",
        || {
            let left: BTreeSet<u128> = data_file_ids(m).difference(&ids).copied().collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{left:032x?}"))
            }
        },
    );
}

#[test]
fn through_the_preload_library_an_unlinked_or_replaced_file_lives_until_closed() {
    eddy_testkit::require::program("python3", "python3");
    let m = Mounted::start(3);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lib = rt.block_on(m.cluster.client());
    std::fs::create_dir(m.path("u")).unwrap();
    let out = python(UNLINK_OPEN_PY, &[&format!("{PREFIX}/u")], Some(&m));
    assert_eq!(
        out, "exists False\nfstat 300000 0\npread xxtail\nsize 300004\nlisted []\nafter close []\n",
        "unlink while open, through the preload library"
    );
    std::fs::create_dir(m.path("r")).unwrap();
    let out = python(RENAME_OVER_OPEN_PY, &[&format!("{PREFIX}/r")], Some(&m));
    assert_eq!(
        out,
        "fstat 8 0\npread old data\nafter write old data more\nby name new\n\
         listed ['old']\nafter close ['old']\n",
        "rename over an open file, through the preload library"
    );
    assert_eq!(m.ok("ls -a u r"), "r:\n.\n..\nold\n\nu:\n.\n..\n");
    // A process that exits without closing closes its handles at exit.
    std::fs::create_dir(m.path("e")).unwrap();
    python(UNLINK_THEN_EXIT_PY, &[&format!("{PREFIX}/e")], Some(&m));
    for d in ["/u", "/e"] {
        assert!(
            lib_names(&lib, &rt, d).is_empty(),
            "{d}: {:?}",
            lib_names(&lib, &rt, d)
        );
    }
    assert_eq!(lib_names(&lib, &rt, "/r"), vec!["old".to_string()]);
    only_data_of(&m, &lib, &rt, &["/r/old"]);
}

#[test]
fn through_the_client_library_an_unlinked_or_replaced_file_lives_until_closed() {
    let m = Mounted::start(3);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lib = rt.block_on(m.cluster.client());
    let me = Creds::root();
    let names = |dir: &str| lib_names(&lib, &rt, dir);
    rt.block_on(lib.mkdir("/d", 0o755, me)).unwrap();

    // Unlinked while open: several chunks, on several daemons.
    let f = rt
        .block_on(lib.create("/d/gone", 0o644, false, me))
        .unwrap();
    rt.block_on(lib.pwrite(&f, 0, &[7u8; 300_000])).unwrap();
    rt.block_on(lib.unlink("/d/gone", me)).unwrap();
    assert_eq!(
        rt.block_on(lib.stat("/d/gone")).unwrap_err().errno,
        libc::ENOENT
    );
    let st = rt.block_on(lib.fstat(&f)).unwrap();
    assert_eq!((st.size, st.nlink), (300_000, 0));
    rt.block_on(lib.pwrite(&f, 300_000, b"tail")).unwrap();
    rt.block_on(lib.fsync(&f)).unwrap();
    assert_eq!(
        rt.block_on(lib.pread(&f, 299_998, 10)).unwrap(),
        b"\x07\x07tail"
    );
    assert_eq!(rt.block_on(lib.fstat(&f)).unwrap().size, 300_004);

    // Replaced by a rename while open.
    let old = rt.block_on(lib.create("/d/old", 0o644, false, me)).unwrap();
    rt.block_on(lib.pwrite(&old, 0, b"old data")).unwrap();
    let new = rt.block_on(lib.create("/d/new", 0o644, false, me)).unwrap();
    rt.block_on(lib.pwrite(&new, 0, b"new")).unwrap();
    rt.block_on(lib.close(&new)).unwrap();
    rt.block_on(lib.rename("/d/new", "/d/old", me)).unwrap();
    let st = rt.block_on(lib.fstat(&old)).unwrap();
    assert_eq!((st.size, st.nlink), (8, 0));
    assert_eq!(rt.block_on(lib.pread(&old, 0, 8)).unwrap(), b"old data");
    rt.block_on(lib.pwrite(&old, 8, b" more")).unwrap();
    assert_eq!(
        rt.block_on(lib.pread(&old, 0, 13)).unwrap(),
        b"old data more"
    );
    let by_name = rt
        .block_on(lib.open("/d/old", libc::O_RDONLY, 0, me))
        .unwrap();
    assert_eq!(rt.block_on(lib.pread(&by_name, 0, 10)).unwrap(), b"new");
    rt.block_on(lib.close(&by_name)).unwrap();
    // The library lists the hidden names (the mount and the preload library leave them out).
    assert_eq!(names("/d").len(), 3, "{:?}", names("/d"));

    rt.block_on(lib.close(&f)).unwrap();
    rt.block_on(lib.close(&old)).unwrap();
    assert_eq!(names("/d"), vec!["old".to_string()]);
    only_data_of(&m, &lib, &rt, &["/d/old"]);
}
