//! Slurm accounting text: the lines of `sacct --parsable2 --noheader -o FIELDS` with
//! [`FIELDS`], and Slurm's time, date and memory formats.

use crate::Job;
use anyhow::{bail, Context, Result};

/// The fields the reader expects, in this order (`sacct -o`).
pub const FIELDS: &str = "JobID,User,ReqCPUS,ReqMem,Timelimit,Submit,Start,End,Elapsed,State";

/// The finished jobs of `sacct` output. Job steps (`123.batch`, `123.0`), jobs that never
/// ran or still run (no start or end) are left out; a malformed line is an error naming it.
pub fn parse(text: &str) -> Result<Vec<Job>> {
    let mut jobs = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        if let Some(job) =
            parse_line(line).with_context(|| format!("sacct line {}: {line:?}", n + 1))?
        {
            jobs.push(job);
        }
    }
    Ok(jobs)
}

fn parse_line(line: &str) -> Result<Option<Job>> {
    let f: Vec<&str> = line.split('|').collect();
    if f.len() < 10 {
        bail!("{} fields, expected 10 ({FIELDS})", f.len());
    }
    let id = f[0];
    if id.contains('.') {
        return Ok(None); // a step of a job, not the job
    }
    let state = f[9].split_whitespace().next().unwrap_or("");
    if matches!(
        state,
        "PENDING" | "RUNNING" | "REQUEUED" | "RESIZING" | "SUSPENDED"
    ) {
        return Ok(None);
    }
    let (Some(start), Some(end)) = (parse_date(f[6])?, parse_date(f[7])?) else {
        return Ok(None);
    };
    let submit = parse_date(f[5])?.unwrap_or(start);
    let cpus: u32 = f[2]
        .trim()
        .parse()
        .with_context(|| format!("ReqCPUS {:?}", f[2]))?;
    let runtime = match parse_duration(f[8])? {
        Some(s) => s,
        None => u64::try_from(end - start).unwrap_or(0),
    };
    Ok(Some(Job {
        id: id.to_string(),
        user: f[1].to_string(),
        cpus,
        mem_mb: parse_mem(f[3], cpus)?,
        limit: parse_duration(f[4])?,
        submit,
        start,
        end,
        runtime,
    }))
}

/// Seconds of a Slurm duration: `[D-]HH:MM:SS`, `D-HH[:MM]`, `MM:SS`, `MM`, an optional
/// fraction of a second; `None` for `UNLIMITED`, `Partition_Limit`, `INVALID` or empty.
pub fn parse_duration(s: &str) -> Result<Option<u64>> {
    let s = s.trim();
    if s.is_empty()
        || matches!(
            s,
            "UNLIMITED" | "Partition_Limit" | "INVALID" | "NONE" | "None"
        )
    {
        return Ok(None);
    }
    let num = |p: &str| -> Result<u64> {
        let whole = p.split('.').next().unwrap_or(p);
        whole
            .parse::<u64>()
            .with_context(|| format!("bad number {p:?} in duration {s:?}"))
    };
    let (days, rest) = match s.split_once('-') {
        Some((d, rest)) => (Some(num(d)?), rest),
        None => (None, s),
    };
    let parts: Vec<u64> = rest.split(':').map(num).collect::<Result<_>>()?;
    let secs = match (days, parts.as_slice()) {
        (Some(d), [h]) => d * 86400 + h * 3600,
        (Some(d), [h, m]) => d * 86400 + h * 3600 + m * 60,
        (Some(d), [h, m, sec]) => d * 86400 + h * 3600 + m * 60 + sec,
        (None, [m]) => m * 60,
        (None, [m, sec]) => m * 60 + sec,
        (None, [h, m, sec]) => h * 3600 + m * 60 + sec,
        _ => bail!("bad duration {s:?}"),
    };
    Ok(Some(secs))
}

/// Requested memory of the whole job in MB: `4000M`, `4G`, `1T`, `512K`, a bare number of
/// MB; Slurm's older suffix `c` (per CPU, multiplied by `cpus`) or `n` (per node, taken as
/// is: the node count is not among the fields). `None` when empty or `0`.
pub fn parse_mem(s: &str, cpus: u32) -> Result<Option<f64>> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    let (s, per_cpu) = match s.strip_suffix('c') {
        Some(rest) => (rest, true),
        None => (s.strip_suffix('n').unwrap_or(s), false),
    };
    let (digits, scale) = match s.chars().last() {
        Some('K') => (&s[..s.len() - 1], 1.0 / 1024.0),
        Some('M') => (&s[..s.len() - 1], 1.0),
        Some('G') => (&s[..s.len() - 1], 1024.0),
        Some('T') => (&s[..s.len() - 1], 1024.0 * 1024.0),
        _ => (s, 1.0),
    };
    let v: f64 = digits
        .parse()
        .with_context(|| format!("bad memory {s:?}"))?;
    if v <= 0.0 {
        return Ok(None);
    }
    let mb = v * scale;
    Ok(Some(if per_cpu {
        mb * f64::from(cpus.max(1))
    } else {
        mb
    }))
}

/// Seconds since the epoch of Slurm's `YYYY-MM-DDTHH:MM:SS`, taken as UTC: Slurm prints local
/// time, so whoever runs `sacct`/`squeue` for this reader sets `TZ=UTC` (eddy does);
/// `None` for `Unknown`, `None` or empty.
pub fn parse_date(s: &str) -> Result<Option<i64>> {
    let s = s.trim();
    if s.is_empty() || matches!(s, "Unknown" | "None" | "N/A") {
        return Ok(None);
    }
    let (date, time) = s
        .split_once('T')
        .with_context(|| format!("bad date {s:?}"))?;
    let d: Vec<i64> = date
        .split('-')
        .map(|p| p.parse::<i64>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("bad date {s:?}"))?;
    let t: Vec<i64> = time
        .split(':')
        .map(|p| p.parse::<i64>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("bad time in {s:?}"))?;
    let ([y, mo, da], [h, mi, se]) = (d.as_slice(), t.as_slice()) else {
        bail!("bad date {s:?}");
    };
    Ok(Some(
        days_from_civil(*y, *mo, *da) * 86400 + h * 3600 + mi * 60 + se,
    ))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_every_slurm_shape() {
        assert_eq!(parse_duration("01:02:03").unwrap(), Some(3723));
        assert_eq!(parse_duration("2-00:00:00").unwrap(), Some(172800));
        assert_eq!(parse_duration("1-02").unwrap(), Some(93600));
        assert_eq!(parse_duration("1-02:30").unwrap(), Some(95400));
        assert_eq!(parse_duration("45").unwrap(), Some(2700));
        assert_eq!(parse_duration("05:30").unwrap(), Some(330));
        assert_eq!(parse_duration("00:00:01.250").unwrap(), Some(1));
        assert_eq!(parse_duration("UNLIMITED").unwrap(), None);
        assert_eq!(parse_duration("Partition_Limit").unwrap(), None);
        assert!(parse_duration("1:2:3:4").is_err());
        assert!(parse_duration("ab:cd").is_err());
    }

    #[test]
    fn memory_units_and_per_cpu() {
        assert_eq!(parse_mem("4000M", 2).unwrap(), Some(4000.0));
        assert_eq!(parse_mem("4G", 2).unwrap(), Some(4096.0));
        assert_eq!(parse_mem("1000Mc", 4).unwrap(), Some(4000.0));
        assert_eq!(parse_mem("2Gn", 4).unwrap(), Some(2048.0));
        assert_eq!(parse_mem("512K", 1).unwrap(), Some(0.5));
        assert_eq!(parse_mem("0", 1).unwrap(), None);
        assert!(parse_mem("lots", 1).is_err());
    }

    #[test]
    fn dates_and_order() {
        assert_eq!(parse_date("1970-01-02T00:00:10").unwrap(), Some(86410));
        assert_eq!(parse_date("2024-03-01T00:00:00").unwrap(), Some(1709251200));
        assert_eq!(parse_date("Unknown").unwrap(), None);
        assert!(parse_date("2024-03-01 00:00").is_err());
    }

    #[test]
    fn sacct_lines_with_steps_odd_times_and_unfinished_jobs() {
        let text = "\
101|alice|4|4000M|01:00:00|2024-01-01T00:00:00|2024-01-01T00:01:00|2024-01-01T00:31:00|00:30:00|COMPLETED
101.batch|alice|4||UNLIMITED|2024-01-01T00:01:00|2024-01-01T00:01:00|2024-01-01T00:31:00|00:30:00|COMPLETED
102|bob|1|1000Mc|1-00:00:00|2024-01-01T01:00:00|2024-01-01T01:00:00|2024-01-02T01:00:00|1-00:00:00|TIMEOUT
103|bob|2|2G|UNLIMITED|2024-01-01T02:00:00|2024-01-01T02:00:05|2024-01-01T02:00:07|00:00:02|CANCELLED by 0
104|carol|1|1G|10:00|2024-01-01T03:00:00|Unknown|Unknown|00:00:00|PENDING
105|carol|1|1G|10:00|2024-01-01T03:00:00|2024-01-01T03:00:01|Unknown|00:05:00|RUNNING
";
        let jobs = parse(text).unwrap();
        assert_eq!(jobs.len(), 3);
        assert_eq!(jobs[0].id, "101");
        assert_eq!(jobs[0].runtime, 1800);
        assert_eq!(jobs[0].limit, Some(3600));
        assert_eq!(jobs[0].mem_mb, Some(4000.0));
        assert_eq!(jobs[0].start - jobs[0].submit, 60);
        assert_eq!(jobs[1].runtime, 86400);
        assert_eq!(jobs[1].mem_mb, Some(1000.0));
        assert_eq!(jobs[2].limit, None);
        assert_eq!(jobs[2].runtime, 2);
        assert!(parse("1|a|x|1G|1:00|2024-01-01T00:00:00|2024-01-01T00:00:00|2024-01-01T00:00:00|0:00|COMPLETED").is_err());
        assert!(parse("1|a|1").is_err());
    }
}
