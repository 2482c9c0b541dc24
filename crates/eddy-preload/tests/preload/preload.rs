//! libeddy_preload.so: unmodified programs (coreutils, tar, find, python3, a shell, C programs
//! with threads, MPI with POSIX I/O and MPI-IO) see a 3-daemon cluster under /eddy through
//! LD_PRELOAD; every result is checked through the client library.
//!
//! The library is this crate's cdylib, built by `cargo test` of this crate before its tests
//! (the tests never link the rlib). It is found next to the test binary
//! (target/<profile>/deps) or one directory up.

use eddy_client::{Client, Creds, FileKind};
use eddy_testkit::{pattern, Cluster};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PREFIX: &str = "/eddy";

pub(crate) struct Pre {
    pub(crate) cluster: Cluster,
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) client: Client,
    /// A real directory for things outside the prefix.
    scratch: tempfile::TempDir,
}

impl Pre {
    pub(crate) fn start() -> Pre {
        Pre::on(Cluster::start(3))
    }

    pub(crate) fn on(cluster: Cluster) -> Pre {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let client = rt.block_on(cluster.client());
        Pre {
            cluster,
            rt,
            client,
            scratch: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub(crate) fn cmd(&self, program: &str) -> Command {
        let mut c = eddy_testkit::preloaded(program, PREFIX, self.cluster.dir.path());
        c.env("EDDY_PRELOAD_LOG", "1")
            .current_dir(self.scratch.path());
        c
    }

    /// Runs a shell script under the library; it must succeed. Returns its stdout.
    pub(crate) fn sh(&self, script: &str) -> String {
        let out = self.cmd("sh").arg("-c").arg(script).output().expect("sh");
        check(script, &out);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs a shell script under the library; returns (success, stdout, stderr).
    fn try_sh(&self, script: &str) -> (bool, String, String) {
        let out = self.cmd("sh").arg("-c").arg(script).output().expect("sh");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The whole contents of an Eddy file, read through the client library.
    pub(crate) fn read(&self, path: &str) -> Vec<u8> {
        self.rt.block_on(async {
            let f = self
                .client
                .open(path, libc::O_RDONLY, 0, Creds::root())
                .await
                .unwrap_or_else(|e| panic!("open {path}: {e:?}"));
            let size = self.client.fstat(&f).await.expect("fstat").size as usize;
            let data = self.client.pread(&f, 0, size + 1).await.expect("pread");
            self.client.close(&f).await.expect("close");
            data
        })
    }

    fn write(&self, path: &str, data: &[u8]) {
        self.rt.block_on(async {
            let f = self
                .client
                .create(path, 0o644, false, Creds::root())
                .await
                .expect("create");
            self.client.pwrite(&f, 0, data).await.expect("pwrite");
            self.client.close(&f).await.expect("close");
        })
    }

    fn kind(&self, path: &str) -> Option<FileKind> {
        self.rt
            .block_on(self.client.stat(path))
            .ok()
            .map(|i| i.kind)
    }

    pub(crate) fn names(&self, dir: &str) -> Vec<String> {
        self.rt.block_on(async {
            let mut r = self.client.readdir(dir, None).expect("readdir");
            let mut names = Vec::new();
            while let Some(page) = r.next_page().await.expect("page") {
                names.extend(page.into_iter().map(|e| e.name));
            }
            names
        })
    }
}

pub(crate) fn check(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "`{what}` failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn write_real(path: &Path, data: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, data).unwrap();
}

#[test]
fn coreutils_see_the_namespace() {
    let p = Pre::start();
    let src = p.scratch.path().join("src");
    let big = pattern(7, 0, 300_000);
    write_real(&src.join("a/big.bin"), &big);
    write_real(&src.join("a/b/small.txt"), b"small\n");
    write_real(&src.join("top.txt"), b"top\n");

    // mkdir -p, cp -r, cat, ls -l, find, stat
    p.sh("mkdir -p /eddy/x/y/z && cp -r src /eddy/x/copy");
    assert_eq!(p.kind("/x/y/z"), Some(FileKind::Dir));
    assert_eq!(p.read("/x/copy/a/big.bin"), big);
    assert_eq!(p.read("/x/copy/a/b/small.txt"), b"small\n");
    assert_eq!(
        p.sh("cat /eddy/x/copy/top.txt /eddy/x/copy/a/b/small.txt"),
        "top\nsmall\n"
    );
    let ls = p.sh("ls -l /eddy/x/copy/a");
    assert!(ls.contains("300000") && ls.contains("big.bin"), "{ls}");
    assert!(
        ls.lines().any(|l| l.starts_with('d') && l.ends_with(" b")),
        "{ls}"
    );
    let mut found: Vec<String> = p
        .sh("find /eddy/x/copy -type f")
        .lines()
        .map(String::from)
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            "/eddy/x/copy/a/b/small.txt",
            "/eddy/x/copy/a/big.bin",
            "/eddy/x/copy/top.txt"
        ]
    );
    assert_eq!(
        p.sh("stat -c '%s %F' /eddy/x/copy/a/big.bin"),
        "300000 regular file\n"
    );
    assert_eq!(p.sh("stat -c '%F' /eddy/x/copy/a"), "directory\n");
    // cmp reads both sides through read(2).
    p.sh("cmp src/a/big.bin /eddy/x/copy/a/big.bin");

    // dd with a block size that is not the chunk size, at an offset (seek) and back out.
    p.sh("dd if=src/a/big.bin of=/eddy/dd.bin bs=7000 status=none");
    assert_eq!(p.read("/dd.bin"), big);
    p.sh("dd if=/eddy/dd.bin of=out.bin bs=4096 skip=10 count=5 status=none");
    assert_eq!(
        std::fs::read(p.scratch.path().join("out.bin")).unwrap(),
        &big[40960..61440]
    );
    p.sh("printf 'XYZ' | dd of=/eddy/dd.bin bs=1 seek=100 conv=notrunc status=none");
    let mut want = big.clone();
    want[100..103].copy_from_slice(b"XYZ");
    assert_eq!(p.read("/dd.bin"), want);

    // touch: a new empty file, and new times on an old one.
    p.sh("touch /eddy/new && touch -d '2001-02-03 04:05:06 UTC' /eddy/dd.bin");
    assert_eq!(p.read("/new"), b"");
    let i = p.rt.block_on(p.client.stat("/dd.bin")).unwrap();
    assert_eq!(i.mtime.sec, 981_173_106);

    // mv: a file and a directory, inside the prefix; across the boundary (EXDEV: mv copies).
    p.sh("mv /eddy/new /eddy/x/renamed && mv /eddy/x/copy /eddy/moved");
    assert_eq!(p.kind("/new"), None);
    assert_eq!(p.kind("/x/renamed"), Some(FileKind::File));
    assert_eq!(p.read("/moved/a/big.bin"), big);
    p.sh("mv src/top.txt /eddy/moved/from-outside.txt");
    assert_eq!(p.read("/moved/from-outside.txt"), b"top\n");
    assert!(!src.join("top.txt").exists());

    // tar c from Eddy to Eddy, x into Eddy; tar c of Eddy into a real file.
    p.sh("tar cf /eddy/t.tar -C /eddy moved && mkdir /eddy/untar && tar xf /eddy/t.tar -C /eddy/untar");
    assert_eq!(p.read("/untar/moved/a/big.bin"), big);
    assert_eq!(p.read("/untar/moved/a/b/small.txt"), b"small\n");
    p.sh("tar cf real.tar -C /eddy untar && mkdir real && tar xf real.tar -C real");
    assert_eq!(
        std::fs::read(p.scratch.path().join("real/untar/moved/a/big.bin")).unwrap(),
        big
    );

    // rm -r
    p.sh("rm -r /eddy/moved /eddy/untar");
    assert_eq!(p.kind("/moved"), None);
    assert_eq!(p.kind("/untar"), None);
    let mut names = p.names("/");
    names.sort();
    assert_eq!(names, ["dd.bin", "t.tar", "x"]);

    // Failures are reported, not hidden.
    let (ok, _, err) = p.try_sh("cat /eddy/missing");
    assert!(!ok && err.contains("No such file"), "{err}");
    let (ok, _, err) = p.try_sh("rmdir /eddy/x");
    assert!(!ok && err.contains("not empty"), "{err}");
    let (ok, _, err) = p.try_sh("mkdir /eddy/x");
    assert!(!ok && err.contains("exists"), "{err}");
}

#[test]
fn shell_redirections_pipelines_fork_exec_and_cwd() {
    let p = Pre::start();
    // dup2 onto stdout by the shell itself (a builtin), and by an exec'd program.
    p.sh("echo hi > /eddy/out");
    assert_eq!(p.read("/out"), b"hi\n");
    p.sh("seq 1 1000 > /eddy/seq && echo more >> /eddy/seq");
    let mut want: String = (1..=1000).map(|i| format!("{i}\n")).collect();
    want.push_str("more\n");
    assert_eq!(String::from_utf8(p.read("/seq")).unwrap(), want);
    // A subshell (fork, no exec) and a pipeline of exec'd programs sharing one descriptor.
    p.sh("(echo a; seq 2; echo b) > /eddy/sub");
    assert_eq!(p.read("/sub"), b"a\n1\n2\nb\n");
    assert_eq!(p.sh("cat /eddy/seq | grep -c 9 | tr -d ' '"), "271\n");
    // Input redirection, and stdio of the exec'd program on it.
    assert_eq!(p.sh("wc -l < /eddy/seq"), "1001\n");
    p.sh("sort -rn < /eddy/seq | head -3 > /eddy/top3");
    assert_eq!(p.read("/top3"), b"1000\n999\n998\n");
    // exec 3> keeps the descriptor in the shell; programs inherit it.
    p.sh("exec 3>/eddy/fd3; echo one >&3; ls /eddy/top3 >&3; echo two >&3; exec 3>&-");
    assert_eq!(p.read("/fd3"), b"one\n/eddy/top3\ntwo\n");
    // A working directory under the prefix: relative paths, pwd, and exec'd programs.
    p.sh("mkdir /eddy/d && cd /eddy/d && echo rel > rel.txt && pwd > where && ls > list");
    assert_eq!(p.read("/d/rel.txt"), b"rel\n");
    assert_eq!(p.read("/d/where"), b"/eddy/d\n");
    assert_eq!(p.read("/d/list"), b"list\nrel.txt\nwhere\n");
    // Paths outside the prefix are untouched.
    let host = std::fs::read_to_string("/etc/hostname").unwrap();
    assert_eq!(p.sh("cat /etc/hostname"), host);
    p.sh("echo real > real.txt && cp /eddy/out copied.txt");
    assert_eq!(
        std::fs::read(p.scratch.path().join("real.txt")).unwrap(),
        b"real\n"
    );
    assert_eq!(
        std::fs::read(p.scratch.path().join("copied.txt")).unwrap(),
        b"hi\n"
    );
}

#[test]
fn python_file_operations_threads_and_fork() {
    let p = Pre::start();
    p.write("/given.bin", &pattern(3, 0, 200_000));
    let script = r#"
import errno, mmap, os, subprocess, threading
os.makedirs("/eddy/py/sub", exist_ok=True)
with open("/eddy/py/f.txt", "w") as f:
    f.write("line\n" * 1000)
with open("/eddy/py/f.txt", "a") as f:
    f.write("appended\n")
assert open("/eddy/py/f.txt").read() == "line\n" * 1000 + "appended\n"
st = os.stat("/eddy/py/f.txt")
assert st.st_size == 5009, st
with open("/eddy/py/f.txt", "r+b") as f:
    f.seek(5); f.write(b"LINE"); f.seek(0); assert f.read(9) == b"line\nLINE"
    # A writable shared mapping cannot be kept coherent by a library: ENODEV.
    try:
        mmap.mmap(f.fileno(), 0)
        raise SystemExit("a writable shared mapping of an Eddy file must fail")
    except OSError as e:
        assert e.errno == errno.ENODEV, e
    # A private one is a copy: the process's stores stay its own.
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    assert m[:9] == b"line\nLINE" and len(m) == 5009, m[:9]
    m[0:4] = b"XXXX"; assert m[:4] == b"XXXX"; m.close()
with open("/eddy/py/f.txt", "rb") as f:
    assert f.read(4) == b"line"
    # A read-only shared one (ACCESS_READ) too, past a page and up to the last byte.
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    assert m[-9:] == b"appended\n" and m[4995:5000] == b"line\n", m[4990:]
    m.close()
os.rename("/eddy/py/f.txt", "/eddy/py/g.txt")
assert sorted(os.listdir("/eddy/py")) == ["g.txt", "sub"], os.listdir("/eddy/py")
assert [e.name for e in os.scandir("/eddy/py") if e.is_dir()] == ["sub"]
data = open("/eddy/given.bin", "rb").read()
assert len(data) == 200000
def work(i):
    with open(f"/eddy/py/sub/t{i}", "wb") as f:
        for k in range(40):
            f.write(bytes([i + k]) * 1000)
    with open(f"/eddy/py/sub/t{i}", "rb") as f:
        assert f.read() == b"".join(bytes([i + k]) * 1000 for k in range(40))
ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
[t.start() for t in ts]
[t.join() for t in ts]
pid = os.fork()
if pid == 0:
    with open("/eddy/py/child", "w") as f:
        f.write("from the child")
    os._exit(0)
os.waitpid(pid, 0)
assert open("/eddy/py/child").read() == "from the child"
try:
    os.open("/eddy/py/child", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    raise SystemExit("O_EXCL on an existing file must fail")
except FileExistsError:
    pass
try:
    os.open("/eddy/py/g.txt", os.O_RDONLY | os.O_DIRECTORY)
    raise SystemExit("O_DIRECTORY on a file must fail")
except NotADirectoryError:
    pass
os.symlink("g.txt", "/eddy/py/link")
assert os.readlink("/eddy/py/link") == "g.txt"
assert open("/eddy/py/link").read(4) == "line"
try:
    os.open("/eddy/py/link", os.O_RDONLY | os.O_NOFOLLOW)
    raise SystemExit("O_NOFOLLOW on a symlink must fail")
except OSError as e:
    assert e.errno == errno.ELOOP, e
os.chdir("/eddy/py")
assert os.getcwd() == "/eddy/py"
import subprocess
run = lambda *a: subprocess.run(a, capture_output=True, text=True, check=True).stdout
assert run("pwd") == "/eddy/py\n", run("pwd")
assert run("ls") == "child\ng.txt\nlink\nsub\n", run("ls")
assert run("cat", "g.txt").startswith("line\nLINE")
assert os.path.exists("child") and os.path.realpath("link") == "/eddy/py/g.txt"
os.remove("child")
os.truncate("g.txt", 10)
assert os.stat("g.txt").st_size == 10
print("PY-OK")
"#;
    let out = p
        .cmd("python3")
        .arg("-c")
        .arg(script)
        .output()
        .expect("python3");
    check("python3", &out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "PY-OK\n");
    for i in 0..8u8 {
        let want: Vec<u8> = (0..40).flat_map(|k| vec![i + k; 1000]).collect();
        assert_eq!(p.read(&format!("/py/sub/t{i}")), want);
    }
    assert_eq!(p.read("/py/g.txt"), b"line\nLINE\n");
    assert_eq!(p.kind("/py/child"), None);
    assert_eq!(p.kind("/py/link"), Some(FileKind::Symlink));
}

/// Builds a C program from tests/scripts with `compiler` into `dir`.
/// Tools that map files, make temporary ones and walk paths their own way: git (mmap of its
/// config, index and packs; mkstemp, whose file glibc opens with an internal `open`), rsync
/// 3.x (a walk by `openat`/`fstatat` from a descriptor of "/"), libc's mkstemp family and
/// mkdtemp called directly, and relative paths from real directories into the prefix.
#[test]
fn git_rsync_temporary_files_and_paths_from_real_directories() {
    eddy_testkit::require::programs(&["git", "rsync", "python3"], "git rsync python3");
    let p = Pre::start();
    let src = p.scratch.path().join("src");
    std::fs::create_dir_all(src.join("d/e")).unwrap();
    write_real(&src.join("a.txt"), b"alpha\n");
    write_real(&src.join("d/b.bin"), &pattern(5, 0, 700_000));
    write_real(&src.join("d/e/c"), b"");
    let src = src.display();
    p.sh(&format!(
        "rsync -a {src}/ /eddy/rs/ && rsync -a --delete {src}/ /eddy/rs/"
    ));
    assert_eq!(p.read("/rs/a.txt"), b"alpha\n");
    assert_eq!(p.read("/rs/d/b.bin"), pattern(5, 0, 700_000));
    assert_eq!(p.names("/rs/d/e"), ["c"]);

    let out = p.sh(
        "cd /eddy && git init -q repo && cd repo && echo hello > f && git add f \
         && git -c user.name=u -c user.email=u@e commit -qm first && git gc -q && git fsck \
         && git clone -q /eddy/repo /eddy/clone && cat /eddy/clone/f \
         && git -C /eddy/clone log --format=%s",
    );
    assert!(out.ends_with("hello\nfirst\n"), "{out}");
    let packs = p.names("/repo/.git/objects/pack");
    assert!(
        packs.iter().any(|n| n.ends_with(".pack")) && packs.iter().any(|n| n.ends_with(".idx")),
        "git gc packed its objects: {packs:?}"
    );

    let out = p.sh(r#"python3 - <<'EOF'
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
t = ctypes.create_string_buffer(b"/eddy/tmp-XXXXXX")
fd = libc.mkstemp(t)
assert fd >= 0, ctypes.get_errno()
os.write(fd, b"made by mkstemp"); os.close(fd)
s = ctypes.create_string_buffer(b"/eddy/tmp-XXXXXX.txt")
fd = libc.mkstemps(s, 4)
assert fd >= 0 and s.value.endswith(b".txt") and b"XXXXXX" not in s.value, s.value
os.close(fd)
d = ctypes.create_string_buffer(b"/eddy/dir-XXXXXX")
assert libc.mkdtemp(d) != 0, ctypes.get_errno()
bad = ctypes.create_string_buffer(b"/eddy/tmp-XXXXX")
assert libc.mkstemp(bad) == -1 and ctypes.get_errno() == errno.EINVAL
print(t.value.decode(), s.value.decode(), d.value.decode())
EOF"#);
    let made: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(made.len(), 3, "{out}");
    let eddy = |p: &str| p.strip_prefix("/eddy").unwrap().to_string();
    assert_eq!(p.read(&eddy(made[0])), b"made by mkstemp");
    let d = p.rt.block_on(p.client.stat(&eddy(made[2]))).unwrap();
    assert_eq!((d.kind, d.mode & 0o777), (FileKind::Dir, 0o700));
    for m in &made {
        assert!(!m.contains("XXXXXX") && m.starts_with("/eddy/"), "{m}");
    }

    // Relative paths from real directories that lead into the prefix, and one that does not.
    let out = p.sh(
        "cd / && cat eddy/rs/a.txt && cd /tmp && ls ../eddy/rs/d && cat /tmp/../eddy/rs/a.txt \
         && cat ../etc/hostname >/dev/null && echo fine",
    );
    assert_eq!(out, "alpha\nb.bin\ne\nalpha\nfine\n");
}

fn build_c(compiler: &str, source: &str, dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scripts")
        .join(source);
    let exe = dir.join(source.trim_end_matches(".c"));
    let out = Command::new(compiler)
        .arg("-O1")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-lpthread")
        .output()
        .unwrap_or_else(|e| {
            eddy_testkit::require::missing(&format!("`{compiler}` cannot run: {e}"))
        });
    check(&format!("{compiler} {source}"), &out);
    exe
}

#[test]
fn c_threads_write_read_and_append() {
    eddy_testkit::require::program("gcc", "gcc");
    let p = Pre::start();
    let exe = build_c("gcc", "preload_threads.c", p.scratch.path());
    p.sh("mkdir /eddy/th");
    let out = p
        .cmd(exe.to_str().unwrap())
        .arg("/eddy/th")
        .output()
        .unwrap();
    check("preload_threads", &out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "THREADS-OK\n");
    for t in 0..8 {
        let want: Vec<u8> = (0..40)
            .flat_map(|k| vec![b'a' + ((t + k) % 26) as u8; 1000])
            .collect();
        assert_eq!(p.read(&format!("/th/t{t}")), want, "thread {t}");
    }
    let log = String::from_utf8(p.read("/th/log")).unwrap();
    let mut lines: Vec<&str> = log.lines().collect();
    lines.sort();
    let want: Vec<String> = (0..8).map(|t| format!("thread {t} done")).collect();
    assert_eq!(lines, want);
}

/// The library's runtime runs on the program's threads while they are in its calls, and on
/// its own thread in between: a size report deferred after a write goes out while the
/// program sleeps, without a close or another call.
#[test]
fn a_program_idle_between_calls_still_publishes_its_writes() {
    eddy_testkit::require::program("python3", "python3");
    let p = Pre::start();
    p.sh("mkdir /eddy/idle");
    let script = "import os, sys, time\n\
        fd = os.open('/eddy/idle/f', os.O_CREAT | os.O_WRONLY, 0o644)\n\
        os.write(fd, b'a' * 1000)\n\
        os.write(fd, b'b' * 5000)\n\
        print('written', flush=True)\n\
        time.sleep(120)\n";
    let mut child = p
        .cmd("python3")
        .arg("-c")
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).expect("read");
    assert_eq!(line, "written\n");
    // The second write's size is published size_update_ms after it, by a timer of the
    // library's runtime: the program is asleep by then.
    // The size then, or the last one after the bound (asserted below, with the program's
    // state).
    let mut size = 0;
    eddy_testkit::eventually::poll_for(std::time::Duration::from_secs(20), || {
        size = p.rt.block_on(p.client.stat("/idle/f")).expect("stat").size;
        (size == 6000).then_some(())
    });
    let still_asleep = child.try_wait().expect("try_wait").is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(still_asleep, "the program ended before the check");
    assert_eq!(size, 6000, "the deferred size never reached the daemons");
}

/// A write the program cannot make on its own thread (stdio's buffers flushed by exit(3),
/// after the thread's thread-locals are gone) runs as a task of the library's runtime,
/// which its own thread drives.
#[test]
fn buffers_flushed_at_exit_reach_the_file() {
    eddy_testkit::require::program("gcc", "gcc");
    let p = Pre::start();
    let exe = build_c("gcc", "preload_exit.c", p.scratch.path());
    p.sh("mkdir /eddy/exit");
    let out = p
        .cmd("timeout")
        .arg("60")
        .arg(exe.to_str().unwrap())
        .arg("/eddy/exit/f")
        .output()
        .unwrap();
    check("preload_exit", &out);
    let want: String = (0..1000)
        .map(|i| format!("line {i} left in the buffer\n"))
        .collect();
    assert_eq!(String::from_utf8(p.read("/exit/f")).unwrap(), want);
}

#[test]
fn mpi_posix_and_mpi_io() {
    eddy_testkit::require::mpirun();
    eddy_testkit::require::program("mpicc", "libopenmpi-dev");
    let p = Pre::start();
    let exe = build_c("mpicc", "preload_mpi.c", p.scratch.path());
    const BLK: usize = 100_000;
    let block = |rank: usize| -> Vec<u8> {
        (0..BLK)
            .map(|i| b'a' + ((rank * 7 + i) % 26) as u8)
            .collect()
    };
    // Both MPI-IO implementations of Open MPI: OMPIO and ROMIO.
    for io in ["ompio", "romio321"] {
        let dir = format!("/{io}");
        p.sh(&format!("mkdir /eddy{dir}"));
        let out = p
            .cmd("mpirun")
            .args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
            .args(["--mca", "io", io])
            .args(["-x", "LD_PRELOAD", "-x", "EDDY_PREFIX", "-x", "EDDY_STATE"])
            .arg(&exe)
            .arg(format!("/eddy{dir}"))
            .output()
            .expect("mpirun");
        check(&format!("mpirun ({io})"), &out);
        assert!(String::from_utf8_lossy(&out.stdout).contains("MPI-OK 2"));
        let both = [block(0), block(1)].concat();
        assert_eq!(p.read(&format!("{dir}/shared")), both, "{io}: shared file");
        assert_eq!(p.read(&format!("{dir}/mpiio")), both, "{io}: MPI-IO file");
        for r in 0..2 {
            assert_eq!(
                p.read(&format!("{dir}/rank{r}")),
                format!("rank {r} of 2\n").as_bytes(),
                "{io}: rank file"
            );
        }
    }
}

#[test]
fn c_calls_one_by_one() {
    eddy_testkit::require::program("gcc", "gcc");
    let p = Pre::start();
    let exe = build_c("gcc", "preload_calls.c", p.scratch.path());
    p.sh("mkdir /eddy/calls");
    let out = p
        .cmd(exe.to_str().unwrap())
        .arg("/eddy/calls")
        .output()
        .unwrap();
    check("preload_calls", &out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "CALLS-OK\n");
    // What the program left, as the client library sees it.
    assert_eq!(p.read("/calls/stdio.txt"), b"hello 42\nabctail\n");
    assert_eq!(p.read("/calls/vec.bin"), b"01AB\0\0Z");
    assert_eq!(p.read("/calls/stdout.txt"), b"printed through stdio\n");
    let mut names = p.names("/calls/dir");
    names.sort();
    assert_eq!(names, ["f2", "f3", "g0", "g1", "hard", "ln"]);
    let g1 = p.rt.block_on(p.client.stat("/calls/dir/g1")).unwrap();
    assert_eq!(
        (g1.mode, g1.uid, g1.mtime.sec, g1.nlink),
        (0o604, 0, 1_200_000_000, 2)
    );
    assert_eq!(
        p.rt.block_on(p.client.readlink("/calls/dir/ln")).unwrap(),
        "g1"
    );
}

#[test]
fn without_a_deployment_calls_fail_clearly() {
    let so = eddy_testkit::preload_so();
    let run = |envs: &[(&str, &str)]| {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("cat /eddy/x")
            .env("LD_PRELOAD", &so)
            .env_remove("EDDY_PREFIX")
            .env_remove("EDDY_STATE");
        for (k, v) in envs {
            c.env(k, v);
        }
        let out = c.output().expect("sh");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // A state directory without deployment.toml: EIO, not an empty file.
    let err = run(&[("EDDY_PREFIX", "/eddy"), ("EDDY_STATE", "/nonexistent")]);
    assert!(err.contains("Input/output error"), "{err}");
    // No EDDY_STATE: EINVAL.
    let err = run(&[("EDDY_PREFIX", "/eddy")]);
    assert!(err.contains("Invalid argument"), "{err}");
    // No EDDY_PREFIX: the library is inert, the real file system answers.
    let err = run(&[]);
    assert!(err.contains("No such file"), "{err}");
}

/// `posix_fadvise` from an unmodified program (Python's `os.posix_fadvise`) on a file of a
/// linked prefix: `WILLNEED` of the whole file fetches every chunk of it from the backend in
/// the background, and the program's reads afterwards fetch nothing; an unknown advice is
/// EINVAL, answered as posix_fadvise answers (an error number, not -1).
#[test]
fn posix_fadvise_willneed_fetches_a_backend_file_ahead() {
    eddy_testkit::require::program("python3", "python3");
    let backend = tempfile::tempdir().expect("tempdir");
    let cs = 64 * 1024;
    let data = pattern(7, 0, 24 * cs + 17);
    std::fs::write(backend.path().join("in.bin"), &data).expect("write the backend file");
    let config = eddy_config::Config {
        links: vec![eddy_config::Link {
            prefix: "/".into(),
            backend: backend.path().to_owned(),
        }],
        ..eddy_testkit::test_config()
    };
    let p = Pre::on(Cluster::start_with(3, config));
    // A figure of the daemons' statuses, summed.
    let figure = |f: fn(&eddy_client::DaemonStatus) -> u64| -> u64 {
        p.rt.block_on(p.client.daemon_status())
            .into_iter()
            .map(|(id, r)| f(&r.unwrap_or_else(|e| panic!("status of daemon {id}: {e:?}"))))
            .sum()
    };
    let script = "import hashlib, os, sys\n\
        fd = os.open('/eddy/in.bin', os.O_RDONLY)\n\
        try:\n\
        \x20   os.posix_fadvise(fd, 0, 0, 77)\n\
        \x20   print('accepted', flush=True)\n\
        except OSError as e:\n\
        \x20   print('refused', e.errno, flush=True)\n\
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)\n\
        print('advised', flush=True)\n\
        sys.stdin.readline()\n\
        h = hashlib.sha256()\n\
        while True:\n\
        \x20   b = os.read(fd, 1 << 20)\n\
        \x20   if not b: break\n\
        \x20   h.update(b)\n\
        print(h.hexdigest(), flush=True)\n";
    let mut child = p
        .cmd("python3")
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).expect("read");
    assert_eq!(line.trim(), format!("refused {}", libc::EINVAL));
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).expect("read");
    assert_eq!(line.trim(), "advised");
    let chunks = 25;
    let cached = eddy_testkit::eventually::poll_for(std::time::Duration::from_secs(30), || {
        (figure(|s| s.tier.cached_chunks) >= chunks).then_some(())
    });
    assert!(
        cached.is_some(),
        "WILLNEED cached {} of the file's {chunks} chunks",
        figure(|s| s.tier.cached_chunks)
    );
    let fetched = figure(|s| s.tier.fetches);
    assert_eq!(fetched, chunks, "WILLNEED fetched each chunk once");
    std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), b"go\n").expect("go");
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).expect("read");
    let status = child.wait().expect("wait");
    assert!(status.success(), "python3 failed");
    let sum = Command::new("sha256sum")
        .arg(backend.path().join("in.bin"))
        .output()
        .expect("sha256sum");
    let sum = String::from_utf8_lossy(&sum.stdout);
    assert_eq!(
        Some(line.trim()),
        sum.split_whitespace().next(),
        "the bytes read"
    );
    assert_eq!(
        figure(|s| s.tier.fetches),
        fetched,
        "the program's reads fetched again what WILLNEED had fetched"
    );
}
