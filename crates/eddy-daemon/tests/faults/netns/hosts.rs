//! Hosts in network namespaces: a client in another serves through them; a dead node's locks go within the deadline.

use super::*;

#[test]
fn hosts_in_network_namespaces_serve_a_client_in_another() {
    let mut net = setup();
    let dir = tempfile::tempdir().unwrap();
    let state = start_on_hosts(&mut net, dir.path(), &["--chunk-size", "65536"]);

    // The deployment lists the three namespaces at their bridge addresses.
    let dep = eddy_config::Deployment::load(&state.join("deployment.toml")).unwrap();
    let addrs: Vec<String> = dep.daemons.iter().map(|d| d.addr.clone()).collect();
    let expected: Vec<String> = (0..HOSTS)
        .map(|i| format!("{}:{}", net.addr(i as u32 + 1), dep.config.port))
        .collect();
    assert_eq!(addrs, expected);
    for (i, d) in dep.daemons.iter().enumerate() {
        assert_eq!(d.host, net.host(i));
        assert_eq!(d.root, dir.path().join(net.host(i)));
        assert!(
            d.socket.is_none(),
            "remote daemons are reached over TCP only"
        );
    }

    // A few MiB through the client library, from the client namespace, and back.
    let data: Vec<u8> = (0..(3 << 20) + 4321u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let src = dir.path().join("src.bin");
    let back = dir.path().join("back.bin");
    std::fs::write(&src, &data).unwrap();
    net.eddy_ok(&["debug", "put", "--state", s(&state), s(&src), "/big.bin"]);
    net.eddy_ok(&["debug", "get", "--state", s(&state), "/big.bin", s(&back)]);
    assert!(
        std::fs::read(&back).unwrap() == data,
        "data read back differs from data written"
    );

    // Status from the client namespace: three daemons on three addresses, all up, all
    // holding chunks of the striped file.
    let out = net.eddy_ok(&["status", "--state", s(&state), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let daemons = v["daemons"].as_array().unwrap();
    assert_eq!(daemons.len(), HOSTS);
    for (i, d) in daemons.iter().enumerate() {
        assert_eq!(d["up"], true, "{d}");
        assert_eq!(d["addr"], expected[i].as_str());
        assert!(
            d["chunks"].as_u64().unwrap() > 0,
            "daemon {i} holds no chunk: {d}"
        );
    }

    // From a host namespace other than the client's, the same deployment is reachable too.
    let out = run(
        "ip",
        &[
            "netns",
            "exec",
            &net.host(0),
            eddy_bin(),
            "status",
            "--state",
            s(&state),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));

    let out = net.eddy_ok(&["stop", "--state", s(&state)]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("stopped"),
        "{}",
        text(&out)
    );
    for i in 0..HOSTS {
        let pids = run("ip", &["netns", "pids", &net.host(i)]);
        assert!(
            String::from_utf8_lossy(&pids.stdout).trim().is_empty(),
            "a daemon still runs in {}",
            net.host(i)
        );
    }
    let out = net.eddy_ok(&["stop", "--state", s(&state)]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing is running"));
    net.state = None;
}

/// A node that dies without closing its connections (its network cut) loses its locks
/// within the RPC deadline: the daemon's TCP keepalive notices, closes the connection and
/// drops the locks taken over it; another node's mount then gets the lock.
#[test]
fn a_dead_nodes_locks_are_released_within_the_deadline() {
    let mut net = setup();
    let dir = tempfile::tempdir().unwrap();
    let state = start_on_hosts(&mut net, dir.path(), &[]);
    let dep = eddy_config::Deployment::load(&state.join("deployment.toml")).unwrap();
    let deadline = std::time::Duration::from_millis(dep.config.rpc_timeout_ms);
    let (ma, mb) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&ma).unwrap();
    std::fs::create_dir_all(&mb).unwrap();
    // Mount a on the "client node", mount b on host 0.
    let mut mount_a = mount_in(&net.client(), &state, &ma, None);
    let mut mount_b = mount_in(&net.host(0), &state, &mb, None);
    std::fs::write(ma.join("f"), b"x").unwrap();
    let mut holder = Command::new("flock")
        .arg("-x")
        .arg(ma.join("f"))
        .args(["-c", "echo locked; exec sleep 600"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("flock(1) is required");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    let try_b = |wait: &str| {
        Command::new("flock")
            .args(["-x", "-w", wait])
            .arg(mb.join("f"))
            .arg("true")
            .status()
            .map(|st| st.success())
            .unwrap_or(false)
    };
    assert!(!try_b("0.5"), "the lock was not held");
    // The client node drops off the network: no FIN, no RST ever reaches the daemons.
    ip(&["-n", &net.client(), "link", "set", "eth0", "down"]);
    let t = std::time::Instant::now();
    let got = try_b(&(deadline * 3).as_secs().to_string());
    let took = t.elapsed();
    let _ = holder.kill();
    for m in [&ma, &mb] {
        let _ = Command::new("umount").arg("-l").arg(m).status();
    }
    for c in [&mut mount_a, &mut mount_b] {
        let _ = c.kill();
        let _ = c.wait();
    }
    let _ = holder.wait();
    assert!(got, "the dead node's lock was never released");
    assert!(
        took <= deadline + std::time::Duration::from_secs(2),
        "released after {took:?}, the RPC deadline is {deadline:?}"
    );
    eprintln!("lock of a dead node released after {took:?} (RPC deadline {deadline:?})");
}
