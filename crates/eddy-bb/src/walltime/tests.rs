//! Tests of the walltime phases: predictions from the history, the staging times, the lock and the records.

use super::*;

#[test]
fn squeue_lines_are_read() {
    let text = "12|alice|2|2|RUNNING|10:00|2024-01-01T00:00:10|4294901759|main|None\n\
                    13|bob|1|1|PENDING|UNLIMITED|N/A|4294901758|main,big|BeginTime\n\
                    14_[1-3]|bob|1|1|PENDING|1:00|N/A|1|main|Priority\n";
    let q = parse_squeue(text);
    assert_eq!(q.len(), 2);
    assert_eq!(
        q[0],
        Queued {
            id: 12,
            user: "alice".into(),
            nodes: 2,
            cpus: 2,
            state: "RUNNING".into(),
            limit: Some(600),
            start: Some(1704067210),
            priority: 4294901759,
            partitions: vec!["main".into()],
            reason: "None".into(),
        }
    );
    assert_eq!((q[1].limit, q[1].start), (None, None));
    assert_eq!(q[1].partitions, ["main", "big"]);
    assert!(
        !CAN_START.contains(&q[1].reason.as_str()),
        "held by --begin"
    );
}

fn queued(id: u32, user: &str, nodes: u32, state: &str, partition: &str, reason: &str) -> Queued {
    Queued {
        id,
        user: user.into(),
        nodes,
        cpus: nodes,
        state: state.into(),
        limit: Some(600),
        start: Some(1000),
        priority: 100,
        partitions: vec![partition.into()],
        reason: reason.into(),
    }
}

/// The plan of job 9 (alice's, 1 node of `main`) at 1000 with every neighbour running
/// 500 s: its predicted start.
fn start_of(queue: &[Queued], w: &WalltimeSite) -> i64 {
    let parts = partition_nodes("n1|main*|idle\nn2|main*|idle\nn3|other|idle\n");
    match plan(w, queue, &parts, 9, 1000, &mut |_| Ok(Some(500))).unwrap() {
        Start::At(t, _) => t,
        other => panic!("{other:?}"),
    }
}

#[test]
fn jobs_that_cannot_start_or_share_no_node_never_delay_a_job() {
    let w = WalltimeSite::default();
    let me = queued(9, "alice", 1, "PENDING", "main", "BurstBufferStageIn");
    // Both nodes of main wanted by an older job that can start: it goes first.
    let ahead = queued(3, "mallory", 2, "PENDING", "main", "Priority");
    assert_eq!(start_of(&[ahead.clone(), me.clone()], &w), 1500);
    // The same job held by --begin, a dependency, a hold or a limit: left out.
    for reason in ["BeginTime", "Dependency", "JobHeldUser", "AssocGrpCpuLimit"] {
        let held = queued(3, "mallory", 2, "PENDING", "main", reason);
        assert_eq!(start_of(&[held, me.clone()], &w), 1000, "{reason}");
    }
    // Running and pending jobs of another partition: left out.
    let there = queued(4, "mallory", 1, "RUNNING", "other", "None");
    let behind = queued(5, "mallory", 1, "PENDING", "other", "Resources");
    let mut big = me.clone();
    big.nodes = 2;
    assert_eq!(start_of(&[there, behind, big], &w), 1000);
}

#[test]
fn other_users_pending_jobs_delay_a_job_at_most_the_bound() {
    let w = WalltimeSite::default();
    let me = queued(9, "alice", 1, "PENDING", "main", "BurstBufferStageIn");
    let running = queued(2, "mallory", 2, "RUNNING", "main", "None");
    let mut queue = vec![running];
    for id in 3..6 {
        queue.push(queued(id, "mallory", 2, "PENDING", "main", "Priority"));
    }
    queue.push(me.clone());
    // Without the bound: 1500 (the running job) + 3 × 500; with it: 1500 + 900.
    let bound = i64::try_from(w.max_delay_by_others_s).unwrap();
    assert_eq!(start_of(&queue, &w), 1500 + bound);
    // The user's own jobs ahead are not bounded.
    for q in queue.iter_mut().filter(|q| q.state == "PENDING") {
        q.user = "alice".into();
    }
    assert_eq!(start_of(&queue, &w), 1500 + 3 * 500);
}

#[test]
fn partitions_hold_their_usable_nodes() {
    let text = "n1|main*|idle\nn2|main*|alloc\nn2|big|alloc\nn3|main*|down*\n\
                    n4|big|drain\nn5|big|mix\n";
    let parts = partition_nodes(text);
    let names = |p: &str| parts[p].iter().cloned().collect::<Vec<_>>();
    assert_eq!(names("main"), ["n1", "n2"]);
    assert_eq!(names("big"), ["n2", "n5"]);
    let both = nodes_of(&parts, &["main".into(), "big".into()]);
    assert_eq!(both.len(), 3, "a node of two partitions counts once");
    assert!(nodes_of(&parts, &["gone".into()]).is_empty());
}
