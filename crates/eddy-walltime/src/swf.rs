//! The Standard Workload Format of the Parallel Workloads Archive (Feitelson et al.): `;`
//! header comment lines, then one job per line of 18 whitespace-separated fields, `-1`
//! where a value is missing. Times are seconds from the log's start; memory is KB per
//! processor.

use crate::Job;
use anyhow::{bail, Context, Result};

/// The jobs of an SWF trace that ran: jobs whose run time or submit time is missing, or
/// whose run time is 0 (they never ran: real logs such as UniLu-Gaia-2014-2 hold such
/// records, and no walltime is within 20 % of nothing), are left out. Requested processors fall back to allocated ones, requested memory to used
/// memory, a missing requested time is no limit. A malformed line is an error naming it.
pub fn parse(text: &str) -> Result<Vec<Job>> {
    let mut jobs = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with(';') {
            continue;
        }
        if let Some(job) =
            parse_line(line).with_context(|| format!("SWF line {}: {line:?}", n + 1))?
        {
            jobs.push(job);
        }
    }
    Ok(jobs)
}

fn parse_line(line: &str) -> Result<Option<Job>> {
    let f: Vec<f64> = line
        .split_whitespace()
        .map(|w| w.parse::<f64>().with_context(|| format!("bad field {w:?}")))
        .collect::<Result<_>>()?;
    if f.len() != 18 {
        bail!("{} fields, expected 18", f.len());
    }
    let known = |v: f64| (v >= 0.0).then_some(v);
    // Fields (1-based): 1 job, 2 submit, 3 wait, 4 run time, 5 allocated processors,
    // 6 average CPU time, 7 used memory, 8 requested processors, 9 requested time,
    // 10 requested memory, 11 status, 12 user, 13 group, 14 executable, 15 queue,
    // 16 partition, 17 preceding job, 18 think time.
    let (Some(submit), Some(run)) = (known(f[1]), known(f[3]).filter(|r| *r > 0.0)) else {
        return Ok(None);
    };
    let wait = known(f[2]).unwrap_or(0.0);
    let procs = known(f[7]).or(known(f[4])).unwrap_or(1.0).max(1.0);
    let mem_kb_per_proc = known(f[9]).or(known(f[6]));
    let submit = submit as i64;
    let start = submit + wait as i64;
    Ok(Some(Job {
        id: format!("{}", f[0] as i64),
        user: match known(f[11]) {
            Some(u) => format!("u{}", u as i64),
            None => "unknown".to_string(),
        },
        cpus: procs as u32,
        mem_mb: mem_kb_per_proc
            .filter(|m| *m > 0.0)
            .map(|m| m * procs / 1024.0),
        limit: known(f[8]).filter(|t| *t > 0.0).map(|t| t as u64),
        submit,
        start,
        end: start + run as i64,
        runtime: run as u64,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_fields_and_missing_values() {
        let text = "\
; Version: 2.2
; Computer: test
;
1 0 10 3600 4 -1 -1 4 7200 1024 1 7 1 -1 1 -1 -1 -1
2 100 -1 60 2 -1 2048 -1 -1 -1 1 8 1 -1 1 -1 -1 -1
3 200 5 -1 1 -1 -1 1 600 -1 0 7 1 -1 1 -1 -1 -1
   4  300  0  30  1  -1  -1  1  60  -1  5  -1  1  -1  1  -1  -1  -1
";
        let jobs = parse(text).unwrap();
        assert_eq!(jobs.len(), 3, "job 3 has no run time");
        let j = &jobs[0];
        assert_eq!(
            (j.user.as_str(), j.cpus, j.limit, j.runtime),
            ("u7", 4, Some(7200), 3600)
        );
        assert_eq!((j.submit, j.start, j.end), (0, 10, 3610));
        assert_eq!(j.mem_mb, Some(4.0));
        let j = &jobs[1];
        assert_eq!(
            (j.cpus, j.limit, j.start),
            (2, None, 100),
            "allocated procs, no limit, no wait"
        );
        assert_eq!(j.mem_mb, Some(4.0), "used memory when none was requested");
        assert_eq!(jobs[2].user, "unknown");
        assert!(parse("1 2 3").is_err());
        assert!(parse("1 0 10 x 4 -1 -1 4 7200 1024 1 7 1 -1 1 -1 -1 -1").is_err());
    }

    /// Lines as the UniLu-Gaia-2014-2 log writes them: a fractional CPU time, a failed job
    /// (status 0) that ran, a job of run time 0 and one of none.
    #[test]
    fn real_log_lines_fractions_failed_and_zero_runs() {
        let text = "\
    6   339299      1 214651   24 358.00  2560   24 432000    -1  1   5   5   6  1 -1 -1 -1
    7   340144      1 432006   24 720.00  2005   24 432000    -1  0   5   5   7  1 -1 -1 -1
    9   340500      3      0    1     -1    -1    1   3600    -1  0   5   5   7  1 -1 -1 -1
   10   340600     -1     -1    1     -1    -1    1   3600    -1  0   5   5   7  1 -1 -1 -1
";
        let jobs = parse(text).unwrap();
        let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(
            ids,
            ["6", "7"],
            "run time 0 and missing run time are left out"
        );
        assert_eq!(
            (jobs[1].runtime, jobs[1].limit),
            (432_006, Some(432_000)),
            "a failed job that ran past its limit is kept as it ran"
        );
    }
}
