//! Directory renames that stop in the middle (decision 0010): a daemon hung or killed, or the
//! renaming client killed, while a tree of a few hundred entries moves. Afterwards the tree
//! is wholly under one name — every path, every file's bytes — never split between two.

use eddy_client::{Client, Creds, Errno, FileKind};
use eddy_config::Config;
use eddy_placement::Placement;
use eddy_testkit::eventually::{eventually_async, poll_async, GUARD};
use eddy_testkit::{pattern, Cluster, Mounted};
use futures::future::join_all;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// What an entry of the test tree is.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Dir,
    /// Bytes `pattern(seed, 0, len)`.
    File {
        seed: u64,
        len: usize,
    },
    Symlink(String),
}

/// Entries of the tree, relative to its top (`/t0`, `/t0/s1/f3`, ...), parents first.
struct Tree(Vec<(String, Kind)>);

impl Tree {
    /// 6 directories, each with 3 subdirectories of 12 files, 4 files of its own, an empty
    /// directory and a symlink: 282 entries. Every 40th file spans three chunks.
    fn new(chunk_size: usize) -> Tree {
        let mut entries = Vec::new();
        let mut seed = 0u64;
        let mut file = |entries: &mut Vec<(String, Kind)>, path: String| {
            seed += 1;
            let len = if seed.is_multiple_of(40) {
                2 * chunk_size + 123
            } else {
                (seed as usize * 37) % 3000
            };
            entries.push((path, Kind::File { seed, len }));
        };
        for t in 0..6 {
            let top = format!("/t{t}");
            entries.push((top.clone(), Kind::Dir));
            entries.push((format!("{top}/empty"), Kind::Dir));
            for s in 0..3 {
                let sub = format!("{top}/s{s}");
                entries.push((sub.clone(), Kind::Dir));
                for f in 0..12 {
                    file(&mut entries, format!("{sub}/f{f}"));
                }
            }
            for f in 0..4 {
                file(&mut entries, format!("{top}/g{f}"));
            }
            entries.push((format!("{top}/link"), Kind::Symlink("s0/f0".into())));
        }
        Tree(entries)
    }

    fn paths(&self) -> BTreeSet<String> {
        self.0.iter().map(|(p, _)| p.clone()).collect()
    }

    /// Creates the tree under `top` (which must not exist).
    async fn build(&self, c: &Client, top: &str) {
        let me = Creds::root();
        c.mkdir(top, 0o755, me).await.unwrap();
        for (rel, kind) in &self.0 {
            if *kind == Kind::Dir {
                c.mkdir(&format!("{top}{rel}"), 0o750, me).await.unwrap();
            }
        }
        let others: Vec<_> = self.0.iter().filter(|(_, k)| *k != Kind::Dir).collect();
        for batch in others.chunks(32) {
            join_all(batch.iter().map(|(rel, kind)| async move {
                let p = format!("{top}{rel}");
                match kind {
                    Kind::File { seed, len } => {
                        let f = c.create(&p, 0o640, true, me).await.unwrap();
                        c.pwrite(&f, 0, &pattern(*seed, 0, *len)).await.unwrap();
                        c.close(&f).await.unwrap();
                    }
                    Kind::Symlink(target) => {
                        c.symlink(target, &p, me).await.unwrap();
                    }
                    Kind::Dir => {}
                }
            }))
            .await;
        }
    }
}

/// Every path of the subtree below `top`, relative to it, by listing every directory.
async fn listed(c: &Client, top: &str) -> Result<BTreeSet<String>, Errno> {
    let mut out = BTreeSet::new();
    let mut dirs = vec![String::new()];
    while let Some(rel) = dirs.pop() {
        let mut rd = c.readdir(&format!("{top}{rel}"), None)?;
        while let Some(page) = rd.next_page().await? {
            for e in page {
                let p = format!("{rel}/{}", e.name);
                if e.inode.kind == FileKind::Dir {
                    dirs.push(p.clone());
                }
                out.insert(p);
            }
        }
    }
    Ok(out)
}

/// The tree is wholly under `top`: the listing is exactly the tree, every entry has its kind,
/// every file its bytes, every symlink its target; and nothing is left under `gone`, not even
/// an entry without its parent.
async fn assert_whole(c: &Client, tree: &Tree, top: &str, gone: &str) {
    assert_eq!(
        listed(c, top).await.unwrap(),
        tree.paths(),
        "the listing of {top}"
    );
    let me = Creds::root();
    for (rel, kind) in &tree.0 {
        let p = format!("{top}{rel}");
        let i = c.stat(&p).await.unwrap_or_else(|e| panic!("{p}: {e}"));
        match kind {
            Kind::Dir => assert_eq!(i.kind, FileKind::Dir, "{p}"),
            Kind::Symlink(t) => assert_eq!(&c.readlink(&p).await.unwrap(), t, "{p}"),
            Kind::File { seed, len } => {
                assert_eq!(i.kind, FileKind::File, "{p}");
                assert_eq!(i.size, *len as u64, "{p}");
                let f = c.open(&p, libc::O_RDONLY, 0, me).await.unwrap();
                let got = c.pread(&f, 0, len + 10).await.unwrap();
                assert!(got == pattern(*seed, 0, *len), "{p}: wrong bytes");
            }
        }
        let old = format!("{gone}{rel}");
        assert_eq!(
            c.stat(&old).await.map(|_| ()).unwrap_err().errno,
            libc::ENOENT,
            "{old} is still there"
        );
    }
    assert_eq!(c.stat(gone).await.unwrap_err().errno, libc::ENOENT);
    let root = listed_names(c, "/").await;
    assert!(
        root.contains(&top[1..]) && !root.contains(&gone[1..]),
        "{root:?}"
    );
}

/// Names in a directory.
async fn listed_names(c: &Client, dir: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rd = c.readdir(dir, None).unwrap();
    while let Some(page) = rd.next_page().await.unwrap() {
        out.extend(page.into_iter().map(|e| e.name));
    }
    out
}

fn placement(c: &Client) -> Placement {
    Placement::new(c.deployment().daemons.iter().map(|d| d.id).collect()).unwrap()
}

/// Names `/srcI` and `/dstJ` for which `pred(owner(from), owner(to))` holds.
fn names(c: &Client, pred: impl Fn(u32, u32) -> bool) -> (String, String) {
    let p = placement(c);
    for i in 0..100 {
        for j in 0..100 {
            let (from, to) = (format!("/src{i}"), format!("/dst{j}"));
            if pred(p.meta_owner(&from), p.meta_owner(&to)) {
                return (from, to);
            }
        }
    }
    panic!("no names fit the placement asked for");
}

fn daemon_pid(cl: &Cluster, i: usize) -> i32 {
    let text = std::fs::read_to_string(cl.root_of(i).join("eddyd.ready")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["pid"].as_i64().unwrap() as i32
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: plain kill(2) on a daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

/// A short RPC deadline, so that a hung daemon fails the rename quickly.
fn config() -> Config {
    Config {
        rpc_timeout_ms: 1_500,
        connect_timeout_ms: 1_000,
        ..eddy_testkit::test_config()
    }
}

/// Waits (bounded) until `to` exists, as a client that runs no completion sees it.
async fn wait_for(observer: &Client, to: &str, done: impl Fn() -> bool) -> bool {
    // Looks every 200 µs: the state to catch is short-lived.
    let done = &done;
    let seen = poll_async(GUARD, Some(Duration::from_micros(200)), || async move {
        if observer.stat(to).await.is_ok() {
            Some(true)
        } else {
            done().then_some(false)
        }
    })
    .await;
    seen.unwrap_or_else(|| panic!("{to} never appeared"))
}

/// A hung daemon (not the owner of the old name) fails the rename with EIO within the RPC
/// deadline and leaves the tree split; once it runs again, the next client to connect
/// completes the rename.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_stopped_by_a_hung_daemon_is_completed_by_the_next_client() {
    let cl = Cluster::start_with(3, config());
    let c = cl.client().await;
    let p = placement(&c);
    // Not daemon 0 (listed first: what it holds is moved before the hang bites), not the
    // owner of / (the rename's checks would fail before anything moves).
    let hung = [1, 2]
        .into_iter()
        .find(|&d| d != p.meta_owner("/"))
        .unwrap();
    let (from, to) = names(&c, |f, t| f != hung && t != hung);
    let tree = Tree::new(c.config().chunk_size as usize);
    tree.build(&c, &from).await;
    let owned_by_hung = tree
        .paths()
        .iter()
        .filter(|rel| p.meta_owner(&format!("{to}{rel}")) == hung)
        .count();
    assert!(owned_by_hung > 10, "the hung daemon holds part of the tree");

    let pid = daemon_pid(&cl, hung as usize);
    signal(pid, libc::SIGSTOP);
    let t = Instant::now();
    let err = c.rename(&from, &to, Creds::root()).await.unwrap_err();
    let took = t.elapsed();
    assert_eq!(err.errno, libc::EIO, "{err}");
    assert!(err.msg.contains("stopped half-way"), "{err}");
    assert!(took < Duration::from_secs(10), "EIO after {took:?}");
    // Split: the new directory and some entries under it, the old one still there. Only
    // entries the running daemons own are looked at.
    let observer = Client::new(cl.dep.clone()).unwrap();
    assert!(observer.stat(&to).await.is_ok());
    assert!(observer.stat(&from).await.is_ok());
    let moved = join_all(
        tree.paths()
            .iter()
            .filter(|rel| p.meta_owner(&format!("{to}{rel}")) != hung)
            .map(|rel| {
                let path = format!("{to}{rel}");
                let o = &observer;
                async move { o.stat(&path).await }
            }),
    )
    .await;
    assert!(
        moved.iter().any(|r| r.is_ok()),
        "some entries are under the new name"
    );
    signal(pid, libc::SIGCONT);

    let fresh = cl.client().await;
    assert_whole(&fresh, &tree, &to, &from).await;
    // The renaming client sees it too, and may go on using both names' parents.
    assert_whole(&c, &tree, &to, &from).await;
    c.rename(&to, &from, Creds::root()).await.unwrap();
    assert_whole(&fresh, &tree, &from, &to).await;
}

/// The same, completed by the renaming client itself when it retries the rename.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_by_the_renaming_client_completes_it() {
    let cl = Cluster::start_with(3, config());
    let c = cl.client().await;
    let p = placement(&c);
    let hung = [1, 2]
        .into_iter()
        .find(|&d| d != p.meta_owner("/"))
        .unwrap();
    let (from, to) = names(&c, |f, t| f != hung && t != hung);
    let tree = Tree::new(c.config().chunk_size as usize);
    tree.build(&c, &from).await;

    let pid = daemon_pid(&cl, hung as usize);
    signal(pid, libc::SIGSTOP);
    let err = c.rename(&from, &to, Creds::root()).await.unwrap_err();
    signal(pid, libc::SIGCONT);
    assert_eq!(err.errno, libc::EIO, "{err}");
    c.rename(&from, &to, Creds::root()).await.unwrap();
    let observer = Client::new(cl.dep.clone()).unwrap();
    assert_whole(&observer, &tree, &to, &from).await;
}

/// A rename of a tree cut by kill -9 of the owner of its old name, then that daemon
/// restarted on its storage.
struct Cut {
    /// The renaming client, alive throughout.
    renamer: Client,
    /// A client that watched the rename, connected before the kill.
    observer: Client,
    tree: Tree,
    from: String,
    to: String,
    /// Whether the observer saw the new name before the kill (the rename was under way).
    seen: bool,
    result: Result<(), Errno>,
}

/// Builds a tree, renames it and kills the owner of its old name in the middle of the move,
/// then restarts that daemon.
async fn rename_cut_by_killing_its_owner(cl: &mut Cluster) -> Cut {
    let c = cl.client().await;
    let p = placement(&c);
    let (from, to) = names(&c, |f, t| f != p.meta_owner("/") && t != f);
    let victim = p.meta_owner(&from);
    let tree = Tree::new(c.config().chunk_size as usize);
    tree.build(&c, &from).await;

    let observer = Client::new(cl.dep.clone()).unwrap();
    let renamer = c.clone();
    let (f2, t2) = (from.clone(), to.clone());
    let task = tokio::spawn(async move { renamer.rename(&f2, &t2, Creds::root()).await });
    let seen = wait_for(&observer, &to, || task.is_finished()).await;
    cl.kill(victim as usize);
    let result = task.await.unwrap();
    eprintln!("new name seen: {seen}; rename: {result:?}");
    cl.restart(victim as usize);
    Cut {
        renamer: c,
        observer,
        tree,
        from,
        to,
        seen,
        result,
    }
}

/// The owner of the old name is killed (kill -9) in the middle of the move and restarted on
/// its storage: the intent it had made durable is completed by the next client to connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_cut_by_a_killed_daemon_is_completed_after_its_restart() {
    let mut cl = Cluster::start_with(3, config());
    let cut = rename_cut_by_killing_its_owner(&mut cl).await;
    if let Err(e) = &cut.result {
        assert_eq!(e.errno, libc::EIO, "{e}");
    }
    let fresh = cl.client().await;
    if cut.seen {
        assert_whole(&fresh, &cut.tree, &cut.to, &cut.from).await;
    } else {
        assert_whole(&fresh, &cut.tree, &cut.from, &cut.to).await;
    }
}

/// A long-lived client (a mount) whose rename was cut by a daemon's death heals by itself once
/// the daemon is back: reconnecting to it, it completes the rename in the background.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_lived_client_completes_the_rename_when_the_daemon_is_back() {
    let mut cl = Cluster::start_with(3, config());
    let cut = rename_cut_by_killing_its_owner(&mut cl).await;
    assert!(cut.seen, "the rename was under way");

    // The same client goes on: its next request to the restarted daemon reconnects.
    let _ = cut.renamer.stat(&cut.from).await;
    let (observer, from) = (&cut.observer, &cut.from);
    eventually_async(GUARD, "the rename is completed", || async move {
        observer.stat(from).await.is_err().then_some(())
    })
    .await;
    assert_whole(&cut.observer, &cut.tree, &cut.to, &cut.from).await;
}

/// The renaming client dies: `mv` of the tree on a FUSE mount whose process is killed (kill
/// -9) in the middle. The next client to connect finds the tree wholly under one name.
#[test]
fn rename_cut_by_a_killed_client_is_completed_by_the_next_client() {
    let m = Mounted::start_with(3, config());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let c = rt.block_on(m.cluster.client());
    let p = placement(&c);
    let (from, to) = names(&c, |f, t| f != p.meta_owner("/") && t != f);
    let tree = Tree::new(c.config().chunk_size as usize);
    rt.block_on(tree.build(&c, &from));
    drop(c);

    let mut mount = m.another_mount();
    let mut mv = std::process::Command::new("mv")
        .arg(mount.path(&from))
        .arg(mount.path(&to))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let observer = Client::new(m.cluster.dep.clone()).unwrap();
    let seen = rt.block_on(async {
        let (observer, to) = (&observer, &to);
        poll_async(GUARD, Some(Duration::from_micros(200)), || {
            let exited = matches!(mv.try_wait(), Ok(Some(_)));
            async move {
                if observer.stat(to).await.is_ok() {
                    Some(true)
                } else {
                    exited.then_some(false)
                }
            }
        })
        .await
        .unwrap_or(false)
    });
    mount.kill_process();
    let out = mv.wait_with_output().unwrap();
    eprintln!(
        "new name seen: {seen}; mv: {} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(seen || out.status.success(), "mv never started the move");
    drop(mount);

    let fresh = rt.block_on(m.cluster.client());
    rt.block_on(assert_whole(&fresh, &tree, &to, &from));
}
