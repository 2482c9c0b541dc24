//! A full deployment (issue 39, decision 0060): three daemons whose roots share one small tmpfs,
//! behind a real FUSE mount. `df` on the mount counts that device once; filling it by write or
//! by fallocate gives the writer ENOSPC and nothing else (the mount stays up); a full deployment
//! can be mounted, listed, read and emptied; a failed fallocate gives back what it took and a
//! removed file's chunks are freed, so the space comes back every time.

use eddy_testkit::tmpfs::Tmpfs;
use eddy_testkit::{require, test_config, Cluster, ExtraMount};
use std::path::{Path, PathBuf};
use std::process::Command;

const MIB: u64 = 1024 * 1024;
/// The tmpfs holding the three daemons' roots.
const DISK: u64 = 256 * MIB;

/// (total, available) bytes of the file system at `p`, by statvfs(2).
fn df(p: &Path) -> (u64, u64) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: statvfs writes into a zeroed struct of its own type; c is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` a writable statvfs, both alive for the call.
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    assert_eq!(r, 0, "statvfs {}", p.display());
    let unit = st.f_frsize;
    (st.f_blocks * unit, st.f_bavail * unit)
}

/// Bytes of storage the daemons' data and checksum files hold (the files in the chunk
/// directories' subdirectories; the store's own few files beside them are not data).
fn data_blocks(cl: &Cluster) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut n = 0;
    for i in 0..cl.dep.daemons.len() {
        for dir in std::fs::read_dir(cl.root_of(i).join("chunks"))
            .unwrap()
            .flatten()
        {
            if dir.file_type().unwrap().is_dir() {
                for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
                    n += e.metadata().map_or(0, |m| m.blocks() * 512);
                }
            }
        }
    }
    n
}

/// The files under the daemons' chunk directories that hold blocks, for failure messages.
fn chunk_files(disk: &Path) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg("find */chunks -mindepth 2 -type f -size +0 -exec ls -ls {} +")
        .current_dir(disk)
        .output()
        .expect("find");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Three daemons on one 256 MiB tmpfs, and a mount. Dropped mount first, the tmpfs last.
struct Full {
    mount: ExtraMount,
    cluster: Cluster,
    disk: PathBuf,
    _tmpfs: Tmpfs,
    _dir: tempfile::TempDir,
}

impl Full {
    fn start() -> Full {
        Full::start_with(test_config())
    }

    /// Placement `local` with FUSE passthrough: the kernel writes the data files itself,
    /// past every daemon's room check.
    fn start_passthrough() -> Full {
        Full::start_with(eddy_config::Config {
            placement: eddy_config::PlacementMode::Local,
            placement_host: Some("localhost".into()),
            fuse_passthrough: true,
            ..test_config()
        })
    }

    fn start_with(config: eddy_config::Config) -> Full {
        require::root("mount a tmpfs");
        let dir = tempfile::tempdir().unwrap();
        let disk = dir.path().join("disk");
        let tmpfs = Tmpfs::mount(&disk, DISK);
        let cluster = Cluster::start_on(3, config, |i| disk.join(format!("d{i}")));
        let mount = cluster.mount();
        Full {
            mount,
            cluster,
            disk,
            _tmpfs: tmpfs,
            _dir: dir,
        }
    }

    fn m(&self, rel: &str) -> PathBuf {
        self.mount.path(rel)
    }

    /// Runs a shell command in the mount: (ok, stdout, stderr).
    fn sh(&self, script: &str) -> (bool, String, String) {
        let out = Command::new("timeout")
            .arg("120")
            .args(["sh", "-c", script])
            .current_dir(self.mount.path(""))
            .output();
        // A mount that cannot be entered (EIO while a daemon restarts) fails the command.
        let Ok(out) = out else {
            return (false, String::new(), format!("{out:?}"));
        };
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn ok(&self, script: &str) -> String {
        let (ok, out, err) = self.sh(script);
        assert!(ok, "`{script}` failed: {err}{}", self.logs());
        out
    }

    /// A command that must fail with ENOSPC ("No space left on device"), not EIO nor anything
    /// else.
    fn enospc(&self, script: &str) {
        let (ok, _, err) = self.sh(script);
        assert!(!ok, "`{script}` succeeded on a full deployment");
        assert!(
            err.contains("No space left on device") && !err.contains("Input/output error"),
            "`{script}`: a full deployment gives ENOSPC and nothing else: {err}{}",
            self.logs()
        );
    }

    /// Free bytes of the tmpfs.
    fn disk_free(&self) -> u64 {
        df(&self.disk).1
    }

    /// Waits until at most `slack` bytes less than `empty` are free on the device: the files
    /// removed are gone once the kernel's releases of their handles are served.
    fn space_comes_back(&self, when: &str, empty: u64, slack: u64) {
        let back = eddy_testkit::eventually::poll_for(eddy_testkit::eventually::GUARD, || {
            (self.disk_free() + slack >= empty).then_some(())
        });
        assert!(
            back.is_some(),
            "{when}: the space did not come back within {:?}: {} bytes free, {empty} when \
             empty; large files:\n{}{}",
            eddy_testkit::eventually::GUARD,
            self.disk_free(),
            self.large_files(),
            self.logs()
        );
    }

    /// The files over 1 MiB on the device, for failure messages.
    fn large_files(&self) -> String {
        let out = Command::new("find")
            .arg(&self.disk)
            .args([
                "-type", "f", "-size", "+1M", "-exec", "ls", "-ls", "{}", "+",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The mount logs, for failure messages.
    fn logs(&self) -> String {
        let mut out = String::new();
        for e in std::fs::read_dir(self.cluster.dir.path())
            .unwrap()
            .flatten()
        {
            if e.file_name().to_string_lossy().starts_with("mount-") {
                let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                // The client's warnings (failed removals, reports), not the kernel's
                // interrupted replies.
                let tail: Vec<&str> = text
                    .lines()
                    .rev()
                    .filter(|l| !l.contains("Failed to send FUSE reply"))
                    .take(40)
                    .collect();
                out.push_str(&format!("\n--- {}:\n", e.path().display()));
                for l in tail.into_iter().rev() {
                    out.push_str(l);
                    out.push('\n');
                }
            }
        }
        for i in 0..3 {
            out.push_str(&format!(
                "\n--- daemon {i}:\n{}",
                self.cluster.daemon_log(i)
            ));
        }
        out
    }

    /// The mount is up and answers: the writer got ENOSPC, nothing else happened to it.
    fn mount_alive(&self) {
        assert!(
            eddy_testkit::is_mountpoint(&self.mount.path("")),
            "the mount went away{}",
            self.logs()
        );
        self.ok("ls -la . >/dev/null && stat . >/dev/null");
    }
}

#[test]
fn statfs_counts_a_disk_shared_by_three_daemons_once() {
    let f = Full::start();
    let (disk_total, disk_avail) = df(&f.disk);
    let (total, avail) = df(&f.m(""));
    assert!(
        total <= disk_total && total > disk_total / 2,
        "three daemons on one {disk_total}-byte disk report {total} bytes"
    );
    // What the daemons keep in reserve is not offered to writers (never more than the disk has).
    assert!(
        avail <= disk_avail,
        "the mount offers {avail} bytes, the disk has {disk_avail} free"
    );
}

/// Fills the deployment by write and by fallocate, empties it, three times: the writer gets
/// ENOSPC and nothing else, a full deployment can be mounted, listed, read and emptied, a
/// failed fallocate gives back what it took and removed files free their chunks.
#[test]
fn a_full_deployment_gives_enospc_and_its_space_back_three_times() {
    require::program("xfs_io", "xfsprogs");
    let f = Full::start();
    let (_, avail) = df(&f.m(""));
    assert!(avail > 0);
    let empty = f.disk_free();
    // Slack for the daemons' metadata stores (journals, compaction) between two looks.
    let slack = 16 * MIB;
    for round in 0..3 {
        f.ok("mkdir -p d/e && echo held > held");
        // By write, until the devices are full.
        f.enospc("dd if=/dev/zero of=fill bs=1M conv=fsync");
        f.mount_alive();
        // Listed and read while full.
        let listed = f.ok("ls");
        assert!(listed.contains("fill"), "round {round}: {listed}");
        let head = f.ok("head -c 1048576 fill | tr -d '\\0' | wc -c; head -c 1048576 fill | wc -c");
        assert_eq!(
            head.split_whitespace().collect::<Vec<_>>(),
            ["0", "1048576"],
            "{head}"
        );
        // Another mount of the full deployment (a new client connecting) works.
        {
            let again = f.cluster.mount();
            let names: Vec<String> = std::fs::read_dir(again.path(""))
                .expect("list a full deployment through a new mount")
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert!(names.contains(&"fill".to_string()), "{names:?}");
        }
        // Emptied while full: directories, a file held open (it lives on until closed), a
        // smaller size, the rest.
        f.ok("rmdir d/e d");
        let held = f.ok("exec 3<held && rm held && cat <&3");
        assert_eq!(held, "held\n");
        f.ok("truncate -s 1M fill");
        f.ok("rm fill");
        let free = f.disk_free();
        assert!(
            free + slack >= empty,
            "round {round}: after rm the disk has {free} bytes free, {empty} when empty{}",
            f.logs()
        );
        assert_eq!(
            data_blocks(&f.cluster),
            0,
            "round {round}: a removed file left chunk data behind: {}",
            chunk_files(&f.disk)
        );

        // By fallocate of what the disk has free (more than the daemons offer: they keep a
        // reserve): ENOSPC, and what it took is given back.
        let (_, avail) = df(&f.m(""));
        f.enospc(&format!(
            "xfs_io -fc 'falloc 0 {}k' spc",
            f.disk_free() / 1024
        ));
        f.mount_alive();
        let free = f.disk_free();
        assert!(
            free + slack >= empty,
            "round {round}: a failed fallocate kept its space: {free} bytes free, {empty} when \
             empty{}",
            f.logs()
        );
        f.ok("touch after && rm after");
        // A fallocate that fits, then removed.
        f.ok(&format!("xfs_io -fc 'falloc 0 {}k' spc", avail / 1024 / 2));
        assert!(f.disk_free() + slack < empty, "fallocate reserved nothing");
        f.ok("rm spc");
        // Blocks past the size (KEEP_SIZE) of a small file are freed by its removal too.
        f.ok("xfs_io -fc 'falloc -k 0 4m' kept && test ! -s kept");
        assert!(
            data_blocks(&f.cluster) >= 4 * MIB,
            "KEEP_SIZE reserved nothing"
        );
        f.ok("rm kept");
        let free = f.disk_free();
        assert!(
            free + slack >= empty,
            "round {round}: after rm of a fallocated file {free} bytes free, {empty} when empty{}",
            f.logs()
        );
        assert_eq!(
            data_blocks(&f.cluster),
            0,
            "round {round}: a removed fallocated file left chunk data behind: {}",
            chunk_files(&f.disk)
        );
    }
}

/// A full device under FUSE passthrough (decision 0049): the kernel writes the data files
/// itself, past every daemon's room check, until the device has no block left, so the
/// daemons' metadata stores meet a full device (fjall poisons its database when a journal
/// write fails: every later removal was EIO, the deployment could not be emptied, and a
/// new mount could not connect). Each daemon holds its reserve as a file and gives it to
/// its store when the device runs out (decision 0060): the writer gets ENOSPC and nothing
/// else, the mount stays up, the files can be removed and the space is used again, three
/// times.
#[test]
fn a_device_filled_through_passthrough_gives_enospc_and_can_be_emptied() {
    let f = Full::start_passthrough();
    let empty = f.disk_free();
    let slack = 16 * MIB;
    for round in 0..3 {
        // Two writers at once, and small files beside them.
        f.enospc(
            "(dd if=/dev/zero of=a bs=1M conv=fsync 2>&1; echo a=$?) > a.out & \
             dd if=/dev/zero of=b bs=1M conv=fsync; b=$?; wait; cat a.out >&2; \
             for i in 1 2 3 4 5 6 7 8; do echo x > s$i; done; exit $b",
        );
        f.mount_alive();
        let written: u64 = f
            .ok("stat -c %s a b")
            .split_whitespace()
            .map(|n| n.parse::<u64>().unwrap())
            .sum();
        assert!(
            written > DISK / 2,
            "round {round}: the writers stopped at {written} bytes"
        );
        f.ok("ls -l >/dev/null && stat a >/dev/null");
        // Updates in place are served on a full device: the stores write their journals.
        f.ok("i=0; while [ $i -lt 100 ]; do chmod 600 a && touch -m -d @$i b && i=$((i+1)) || exit 1; done");
        f.ok("rm -f a b a.out s1 s2 s3 s4 s5 s6 s7 s8");
        assert_eq!(f.ok("ls -A").trim(), "", "round {round}");
        // The kernel sends a FUSE release after the close returned, so `rm` may meet handles
        // of the 100 `touch`es still open: b lives on under a hidden name until the last of
        // those releases (decision 0061), and its space comes back then.
        f.space_comes_back(&format!("round {round}, after rm"), empty, slack);
        // The space is used again, and a new mount connects.
        f.ok("dd if=/dev/zero of=again bs=1M count=64 conv=fsync 2>/dev/null && rm again");
        f.space_comes_back(
            &format!("round {round}, after the space was used again"),
            empty,
            slack,
        );
        {
            let again = f.cluster.mount();
            std::fs::read_dir(again.path("")).expect("list through a new mount");
        }
        for i in 0..3 {
            let log = f.cluster.daemon_log(i);
            assert!(
                !log.contains("Poisoned") && !log.contains("FATAL"),
                "round {round}: daemon {i}'s store met the full device:\n{log}"
            );
        }
    }
}

/// Many writers at once fill the device that the daemons' stores share (passthrough `dd`s,
/// fio jobs and small files): writers still writing may take the blocks the reserve gave
/// back before a store writes its journal, and a store whose journal write fails refuses
/// every later write (decision 0060). The daemon restarts itself in place once the device
/// has room again, so the files can be removed without anyone restarting anything, the
/// space comes back and the deployment is used again, three times.
#[test]
fn concurrent_writers_filling_the_device_leave_a_deployment_that_can_be_emptied() {
    let f = Full::start_passthrough();
    let empty = f.disk_free();
    let slack = 16 * MIB;
    for round in 0..3 {
        // Fails (ENOSPC); what matters is what can be done afterwards.
        let _ = f.sh(
            "for i in 1 2 3 4; do dd if=/dev/zero of=d$i bs=1M conv=fsync 2>/dev/null & done; \
             fio --name=w --directory=. --rw=write --bs=64k --size=100m --numjobs=4 \
                 --ioengine=psync --end_fsync=1 >/dev/null 2>&1 & \
             i=0; while [ $i -lt 300 ]; do echo x > s$i 2>/dev/null; i=$((i+1)); done; wait",
        );
        // A daemon whose store refused writes restarts meanwhile: requests in flight then
        // fail as at any daemon's restart, and the mount stays.
        assert!(
            eddy_testkit::is_mountpoint(&f.m("")),
            "the mount went away{}",
            f.logs()
        );
        let mut seen = String::new();
        let removed = eddy_testkit::eventually::poll_for(eddy_testkit::eventually::GUARD, || {
            // `ls` alone: in a pipe its failure (a daemon that did not come back)
            // would read as an empty directory.
            match f.sh("rm -f ./*; ls -A") {
                (true, out, _) if out.trim().is_empty() => Some(()),
                (_, out, err) => {
                    seen = format!("{out}{err}");
                    None
                }
            }
        });
        assert!(
            removed.is_some(),
            "round {round}: what was written is not removed: {seen}{}",
            f.logs()
        );
        f.space_comes_back(&format!("round {round}, after rm"), empty, slack);
        f.ok(
            "dd if=/dev/zero of=again bs=1M count=64 conv=fsync 2>/dev/null && \
              i=0; while [ $i -lt 100 ]; do echo x > t$i || exit 1; i=$((i+1)); done; \
              rm -f ./*",
        );
        f.space_comes_back(
            &format!("round {round}, after the space was used again"),
            empty,
            slack,
        );
    }
}

/// The mount's log on a device that is full (as after `eddy start --mount` on a host whose
/// disk filled: the state directory holds the mount's log): a line it cannot write is
/// lost, and nothing else happens. The logging library reported a failed write with
/// `eprintln!`, which panics when standard error cannot be written: a request thread died
/// mid-reply, the mount went away and its writers got "Software caused connection abort".
#[test]
fn a_mount_whose_log_device_is_full_stays_up() {
    require::root("mount a tmpfs");
    require::fuse();
    let cluster = Cluster::start_with(3, test_config());
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let _tmpfs = Tmpfs::mount(&logs, MIB);
    let log = std::fs::File::create(logs.join("mount.log")).unwrap();
    let _ = Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", logs.join("fill").display()))
        .arg("bs=64k")
        .output();
    assert_eq!(df(&logs).1, 0, "the log device is not full");
    let mnt = tempfile::tempdir().unwrap();
    // Every request is logged (debug), so every one meets the full device.
    let mut child = Command::new(eddy_testkit::eddy_bin())
        .args(["mount", "--foreground", "--allow-other", "--state"])
        .arg(cluster.dir.path())
        .arg(mnt.path())
        .env("EDDY_LOG", "debug")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let began = std::time::Instant::now();
    while !eddy_testkit::is_mountpoint(mnt.path()) {
        assert!(
            began.elapsed() < std::time::Duration::from_secs(30),
            "the mount did not appear"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let run = |script: &str| {
        Command::new("timeout")
            .args(["60", "sh", "-c", script])
            .current_dir(mnt.path())
            .output()
            .unwrap()
    };
    let out = run("for i in $(seq 1 50); do \
         stat missing$i 2>/dev/null; echo data$i > f$i && cat f$i >/dev/null || exit 1; done; \
         ls | wc -l; rm f*; ls | wc -l");
    let alive = child.try_wait().unwrap().is_none();
    let _ = Command::new("fusermount3")
        .arg("-u")
        .arg(mnt.path())
        .status();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["50", "0"]
    );
    assert!(alive, "the mount's process ended");
}

/// Space for sequential writers on (decision 0074): `dd` through the daemons (direct local
/// I/O off, as a writer on another node) gets the slots of its next chunks preallocated on
/// each daemon; the device fills all the same, the writer gets ENOSPC and nothing else, and
/// removing the file gives every block back (nothing stays preallocated), three times.
#[test]
fn a_device_filled_by_a_writer_with_space_ahead_gives_enospc_and_is_emptied() {
    let f = Full::start_with(eddy_config::Config {
        direct_io: false,
        write_prealloc_chunks: 8,
        ..test_config()
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt.block_on(f.cluster.client());
    let prealloc = || -> (u64, u64) {
        rt.block_on(c.daemon_status())
            .into_iter()
            .map(|(id, r)| r.unwrap_or_else(|e| panic!("status of daemon {id}: {e:?}")))
            .fold((0, 0), |(n, e), s| {
                (n + s.preallocated_bytes, e + s.preallocated_total_bytes)
            })
    };
    let empty = f.disk_free();
    let slack = 16 * MIB;
    for round in 0..3 {
        let ever = prealloc().1;
        f.enospc("dd if=/dev/zero of=fill bs=1M conv=fsync");
        f.mount_alive();
        assert!(
            prealloc().1 > ever,
            "round {round}: the sequential writer got no space ahead"
        );
        f.ok("rm fill");
        f.space_comes_back(&format!("round {round}: after rm"), empty, slack);
        assert_eq!(
            data_blocks(&f.cluster),
            0,
            "round {round}: a removed file left chunk data behind: {}",
            chunk_files(&f.disk)
        );
        assert_eq!(prealloc().0, 0, "round {round}: preallocations left");
    }
}
