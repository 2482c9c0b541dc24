//! Durability: what was fsync'd survives kill -9 of the daemons and a restart on the same
//! storage; a clean SIGTERM stop keeps everything too.

use eddy_client::{Creds, FileKind};
use eddy_testkit::{pattern, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsynced_data_survives_kill_9_and_restart() {
    let mut cl = Cluster::start(3);
    let me = Creds::root();
    let cs = cl.dep.config.chunk_size as usize;
    {
        let c = cl.client().await;
        c.mkdir("/dir", 0o750, me).await.unwrap();
        c.symlink("/dir/f0", "/link", me).await.unwrap();
        for i in 0..6u64 {
            let f = c
                .create(&format!("/dir/f{i}"), 0o644, true, me)
                .await
                .unwrap();
            c.pwrite(&f, 0, &pattern(i, 0, cs * 2 + 100 * i as usize))
                .await
                .unwrap();
            c.fsync(&f).await.unwrap();
        }
    }
    cl.kill_and_restart_all();
    let c = cl.client().await;
    assert_eq!(c.stat("/dir").await.unwrap().mode, 0o750);
    assert_eq!(c.stat("/link").await.unwrap().kind, FileKind::Symlink);
    let mut names = Vec::new();
    let mut rd = c.readdir("/dir", None).unwrap();
    while let Some(p) = rd.next_page().await.unwrap() {
        names.extend(p.into_iter().map(|e| e.name));
    }
    assert_eq!(names, (0..6).map(|i| format!("f{i}")).collect::<Vec<_>>());
    for i in 0..6u64 {
        let f = c
            .open(&format!("/dir/f{i}"), libc::O_RDONLY, 0, me)
            .await
            .unwrap();
        let want = pattern(i, 0, cs * 2 + 100 * i as usize);
        assert_eq!(
            c.pread(&f, 0, want.len() + 1).await.unwrap(),
            want,
            "file {i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_cleanly_and_restart_keeps_everything() {
    let mut cl = Cluster::start(3);
    let me = Creds::root();
    {
        let c = cl.client().await;
        let f = c.create("/kept", 0o600, true, me).await.unwrap();
        c.pwrite(&f, 0, &pattern(5, 0, 300_000)).await.unwrap();
    }
    for i in 0..3 {
        assert!(
            cl.terminate(i),
            "daemon {i} did not exit cleanly on SIGTERM"
        );
        assert!(
            !cl.root_of(i).join("eddyd.ready").exists(),
            "ready file removed on clean stop"
        );
    }
    for i in 0..3 {
        cl.restart(i);
    }
    let c = cl.client().await;
    let f = c.open("/kept", libc::O_RDONLY, 0, me).await.unwrap();
    assert_eq!(
        c.pread(&f, 0, 400_000).await.unwrap(),
        pattern(5, 0, 300_000)
    );
}

/// A daemon that restarts between a write it acknowledged and the fsync may have lost the
/// write (it was in no durable place): the fsync reports EIO (decision 0015), once; written
/// again, the file syncs. The daemon's new instance number in its hello is how the client
/// tells a restart from a connection that only broke.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_fsync_after_the_data_daemon_restarted_reports_the_lost_writes() {
    let mut cl = Cluster::start(3);
    let me = Creds::root();
    let c = cl.client().await;
    let placement = eddy_placement::Placement::new(vec![0, 1, 2]).unwrap();
    // A one-chunk file whose data daemon is not its metadata owner (whose records the
    // client's fsync would also sync: the restart is to be seen on the data daemon alone).
    let mut i = 0;
    let (f, data_daemon) = loop {
        let path = format!("/f{i}");
        let f = c.create(&path, 0o644, true, me).await.unwrap();
        let d = placement.chunk_owner(f.file_id(), 0);
        if d != placement.meta_owner(&path) {
            break (f, d);
        }
        i += 1;
    };
    let data = pattern(1, 0, 5000);
    c.pwrite(&f, 0, &data).await.unwrap();
    c.fsync(&f).await.unwrap();
    c.pwrite(&f, 0, &pattern(2, 0, 5000)).await.unwrap();
    cl.kill(data_daemon as usize);
    cl.restart(data_daemon as usize);
    let e = c.fsync(&f).await.unwrap_err();
    assert_eq!(e.errno, libc::EIO, "{e}");
    // Written again, it syncs.
    c.pwrite(&f, 0, &pattern(3, 0, 5000)).await.unwrap();
    c.fsync(&f).await.unwrap();
    assert_eq!(c.pread(&f, 0, 6000).await.unwrap(), pattern(3, 0, 5000));
}
