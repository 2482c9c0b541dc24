//! When will a pending job start? A first-come-first-served replay of the machine from now:
//! the running jobs free their nodes at their predicted ends, the pending jobs ahead of the
//! job (in Slurm's order) start one after another as soon as enough nodes are free, each
//! holding its nodes for its predicted runtime; the job starts when enough nodes are free
//! after all of them started. Backfill is ignored (a job never starts before one ahead of
//! it), so the answer is the latest a backfilling scheduler would start it, given the
//! predictions. Pure computation.

use crate::correct::{correct, Correction};

/// A running job: its nodes and its predicted end (seconds since the epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Running {
    pub nodes: u32,
    pub end: i64,
}

/// A pending job ahead of the one asked about: its nodes and its predicted runtime (s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    pub nodes: u32,
    pub runtime: u64,
}

/// The predicted end of a job that started at `start` with a predicted runtime `predicted`
/// and a limit `limit` (`None`: unlimited), at `now`: start + the prediction clipped to the
/// limit; a job still running past its prediction gets the `correction` (COARE §4.4: the
/// prediction extended in steps until it covers the time run plus the margin), never past
/// its limit, and never ends before `now`.
pub fn running_end(
    start: i64,
    predicted: u64,
    limit: Option<u64>,
    correction: Correction,
    now: i64,
) -> i64 {
    let cap = limit.unwrap_or(u64::MAX);
    let ran = u64::try_from(now - start).unwrap_or(0);
    let walltime = correct(correction, predicted.min(cap), ran, cap).walltime;
    (start.saturating_add(i64::try_from(walltime).unwrap_or(i64::MAX))).max(now)
}

/// The predicted start of a job of `nodes` nodes on a machine of `total` nodes at `now`,
/// with `running` jobs and the `ahead` pending jobs before it in order; `None` if it (or a
/// job ahead of it) asks for more nodes than the machine has.
pub fn predicted_start(
    now: i64,
    total: u32,
    running: &[Running],
    ahead: &[Pending],
    nodes: u32,
) -> Option<i64> {
    // Nodes in use as (end, nodes); a job ending at or before t has freed its nodes at t.
    let mut busy: Vec<(i64, u32)> = running.iter().map(|r| (r.end.max(now), r.nodes)).collect();
    let mut t = now;
    for p in ahead {
        let s = earliest(total, &busy, t, p.nodes)?;
        busy.push((
            s.saturating_add(i64::try_from(p.runtime).unwrap_or(i64::MAX)),
            p.nodes,
        ));
        t = s;
    }
    earliest(total, &busy, t, nodes)
}

/// The first instant ≥ `from` when `want` nodes are free.
fn earliest(total: u32, busy: &[(i64, u32)], from: i64, want: u32) -> Option<i64> {
    if want > total {
        return None;
    }
    let free_at = |t: i64| -> u32 {
        let used: u32 = busy
            .iter()
            .filter(|(end, _)| *end > t)
            .map(|(_, n)| n)
            .sum();
        total.saturating_sub(used)
    };
    let mut candidates: Vec<i64> = busy
        .iter()
        .map(|(end, _)| *end)
        .filter(|e| *e > from)
        .collect();
    candidates.sort_unstable();
    std::iter::once(from)
        .chain(candidates)
        .find(|&t| free_at(t) >= want)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_machine_starts_the_job_now() {
        assert_eq!(predicted_start(100, 4, &[], &[], 4), Some(100));
        assert_eq!(
            predicted_start(100, 4, &[Running { nodes: 2, end: 500 }], &[], 2),
            Some(100)
        );
        assert_eq!(predicted_start(100, 4, &[], &[], 5), None, "too big");
    }

    #[test]
    fn the_job_waits_for_enough_nodes_to_free() {
        let running = [
            Running { nodes: 1, end: 300 },
            Running { nodes: 2, end: 200 },
            Running { nodes: 1, end: 900 },
        ];
        // 4 nodes all busy: 2 free at 200, 3 at 300, 4 at 900.
        assert_eq!(predicted_start(100, 4, &running, &[], 1), Some(200));
        assert_eq!(predicted_start(100, 4, &running, &[], 2), Some(200));
        assert_eq!(predicted_start(100, 4, &running, &[], 3), Some(300));
        assert_eq!(predicted_start(100, 4, &running, &[], 4), Some(900));
    }

    #[test]
    fn jobs_ahead_go_first_without_backfill() {
        let running = [Running { nodes: 2, end: 200 }];
        let ahead = [
            Pending {
                nodes: 2,
                runtime: 500,
            },
            Pending {
                nodes: 1,
                runtime: 50,
            },
        ];
        // At 100: 2 of 4 nodes free, so the first job ahead starts at 100 (ends 600); the
        // second at 200 (ends 250); our 2-node job: at 200 only 1 node is free, at 250 two.
        assert_eq!(predicted_start(100, 4, &running, &ahead, 2), Some(250));
        // A 3-node job waits for the first one ahead to end.
        assert_eq!(predicted_start(100, 4, &running, &ahead, 3), Some(600));
        // FCFS: a 1-node job behind a 4-node job (200 to 300) does not slip in before it,
        // though 2 nodes are free now.
        let big = [Pending {
            nodes: 4,
            runtime: 100,
        }];
        assert_eq!(predicted_start(100, 4, &running, &big, 1), Some(300));
        assert_eq!(
            predicted_start(
                100,
                4,
                &running,
                &[Pending {
                    nodes: 9,
                    runtime: 1
                }],
                1
            ),
            None
        );
    }

    #[test]
    fn running_ends_are_clipped_and_corrected() {
        // Predicted 60 s of a 600 s limit, started at 1000: ends at 1060.
        assert_eq!(
            running_end(1000, 60, Some(600), Correction::None, 1010),
            1060
        );
        // A prediction past the limit is clipped to it.
        assert_eq!(
            running_end(1000, 6000, Some(600), Correction::None, 1010),
            1600
        );
        // Past its prediction without correction: it ends "now".
        assert_eq!(
            running_end(1000, 60, Some(600), Correction::None, 1100),
            1100
        );
        // Power correction: +15 min, clipped to the limit; simple: +1 h, clipped too.
        assert_eq!(
            running_end(1000, 60, Some(7200), Correction::Power, 1100),
            1000 + 60 + 900
        );
        assert_eq!(
            running_end(1000, 60, Some(600), Correction::Simple, 1100),
            1600
        );
        // Unlimited.
        assert_eq!(running_end(1000, 60, None, Correction::None, 1010), 1060);
    }
}
