//! Results: per-phase numbers, the IO500-style score, the human tables, the JSON file format
//! and comparisons between runs.

use crate::args::WorkloadOpts;
use crate::msg::PhaseStats;
use crate::plan::{Kind, Phase};
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// Identifies the JSON format; bumped on incompatible changes.
pub const FORMAT: &str = "eddy-bench/1";
const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = 1024.0 * MIB;

/// The content of a `--json` file: one or more runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultsFile {
    pub format: String,
    /// Where the runs ran (`eddy bench suite`): one host, or hosts in network namespaces.
    /// Absent in files of `run` and `scale` and in files written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<Layout>,
    pub runs: Vec<Report>,
    /// The Python package's benchmark (`suite --client-py`). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<crate::suite::PythonBench>,
}

/// The measurement layout of a suite (decision 0042): which "hosts" the daemons and the
/// ranks ran on, so that "local" and "remote" can be read off the results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Layout {
    /// What tables and plots say: `one host` or `N hosts (netns)`.
    pub name: String,
    /// Hosts: 1 for the single-host layout, else the network namespaces.
    pub hosts: u32,
    /// The network namespaces, host i's daemon and ranks r with r mod hosts = i in the i-th
    /// (empty for one host).
    pub namespaces: Vec<String>,
    /// The daemons' addresses, as the deployment recorded them.
    pub daemons: Vec<String>,
    /// The tc rate of every host's link (`--link-rate`), if limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_rate: Option<String>,
    /// The placement of new files in the deployments measured (decision 0047): `hashed`,
    /// `local`, or with variants of different placements each as `MODE [NAME]`, comma
    /// separated. Absent in files written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
}

impl Layout {
    /// The single-host layout's name.
    pub const ONE_HOST: &'static str = "one host";

    /// The name of the layout of `hosts` network namespaces.
    pub fn hosts_name(hosts: u32) -> String {
        format!("{hosts} hosts (netns)")
    }
}

/// One run of the workloads on one directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub label: String,
    /// The benchmarked directory.
    pub target: String,
    pub procs: u32,
    /// Unix time the run started.
    pub started_unix: u64,
    pub options: WorkloadOpts,
    pub phases: Vec<PhaseResult>,
    pub score: Score,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseResult {
    pub phase: Phase,
    pub kind: Kind,
    pub ops: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub mib_s: f64,
    pub kiops: f64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
}

impl PhaseResult {
    pub fn new(phase: Phase, stats: &PhaseStats, seconds: f64) -> PhaseResult {
        let secs = seconds.max(1e-9);
        PhaseResult {
            phase,
            kind: phase.kind(),
            ops: stats.ops,
            bytes: stats.bytes,
            seconds,
            mib_s: stats.bytes as f64 / MIB / secs,
            kiops: stats.ops as f64 / 1000.0 / secs,
            p50_us: stats.latency.quantile_us(0.50),
            p99_us: stats.latency.quantile_us(0.99),
        }
    }

    /// The number that matters for this phase: MiB/s for bandwidth phases, else kIOPS.
    pub fn primary(&self) -> f64 {
        match self.kind {
            Kind::Bw => self.mib_s,
            _ => self.kiops,
        }
    }

    pub fn unit(&self) -> &'static str {
        match self.kind {
            Kind::Bw => "MiB/s",
            _ => "kIOPS",
        }
    }
}

/// IO500-style score: BW = geometric mean of the IOR phases in GiB/s, MD = geometric mean of
/// the metadata phases in kIOPS, score = √(BW·MD). A part is None when none of its phases ran.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Score {
    pub bw_gib_s: Option<f64>,
    pub md_kiops: Option<f64>,
    pub score: Option<f64>,
}

pub fn geomean(values: &[f64]) -> Option<f64> {
    if values.is_empty() || values.iter().any(|v| v.is_nan() || *v <= 0.0) {
        return None;
    }
    Some((values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64).exp())
}

impl Score {
    pub fn of(phases: &[PhaseResult]) -> Score {
        let bw: Vec<f64> = phases
            .iter()
            .filter(|p| p.kind == Kind::Bw)
            .map(|p| p.mib_s * MIB / GIB)
            .collect();
        let md: Vec<f64> = phases
            .iter()
            .filter(|p| p.kind == Kind::Md)
            .map(|p| p.kiops)
            .collect();
        let bw_gib_s = geomean(&bw);
        let md_kiops = geomean(&md);
        let score = match (bw_gib_s, md_kiops) {
            (Some(b), Some(m)) => Some((b * m).sqrt()),
            _ => None,
        };
        Score {
            bw_gib_s,
            md_kiops,
            score,
        }
    }
}

impl ResultsFile {
    pub fn new(runs: Vec<Report>) -> ResultsFile {
        ResultsFile {
            format: FORMAT.to_string(),
            layout: None,
            runs,
            python: None,
        }
    }

    pub fn with_layout(mut self, layout: Option<Layout>) -> ResultsFile {
        self.layout = layout;
        self
    }

    pub fn load(path: &Path) -> anyhow::Result<ResultsFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let f: ResultsFile = serde_json::from_str(&text)
            .with_context(|| format!("{} is not an eddy bench result file", path.display()))?;
        if f.format != FORMAT {
            bail!(
                "{}: format {:?}, this eddy reads {FORMAT:?}",
                path.display(),
                f.format
            );
        }
        Ok(f)
    }

    /// Writes the file, or to stdout for `-`.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self).context("encoding results")?;
        if path == Path::new("-") {
            crate::out(format_args!("{text}\n"));
            return Ok(());
        }
        std::fs::write(path, text + "\n")
            .with_context(|| format!("cannot write {}", path.display()))
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".to_string(), |v| format!("{v:.prec$}"))
}

/// The human table of one run.
pub fn table(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{} — {} ({} procs)", r.label, r.target, r.procs);
    let _ = writeln!(
        s,
        "{:<20} {:>10} {:>9} {:>10} {:>10} {:>8}",
        "phase", "MiB/s", "kIOPS", "p50 µs", "p99 µs", "time s"
    );
    for p in &r.phases {
        let _ = writeln!(
            s,
            "{:<20} {:>10.1} {:>9.2} {:>10} {:>10} {:>8.2}",
            p.phase.name(),
            p.mib_s,
            p.kiops,
            opt(p.p50_us, 1),
            opt(p.p99_us, 1),
            p.seconds
        );
    }
    let _ = writeln!(
        s,
        "score: BW {} GiB/s, MD {} kIOPS, score {}",
        opt(r.score.bw_gib_s, 3),
        opt(r.score.md_kiops, 3),
        opt(r.score.score, 3)
    );
    s
}

/// Ratio b / a, None when a is zero.
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (a > 0.0).then(|| b / a)
}

/// The comparison table: each phase of `a` and `b`, and the ratio b / a.
pub fn compare_table(a: &Report, b: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} vs {} (ratio = {} / {})",
        b.label, a.label, b.label, a.label
    );
    let _ = writeln!(
        s,
        "{:<20} {:>14} {:>14} {:>8} {:>6}",
        "phase", a.label, b.label, "ratio", "unit"
    );
    for pa in &a.phases {
        let Some(pb) = b.phases.iter().find(|p| p.phase == pa.phase) else {
            continue;
        };
        let _ = writeln!(
            s,
            "{:<20} {:>14.2} {:>14.2} {:>8} {:>6}",
            pa.phase.name(),
            pa.primary(),
            pb.primary(),
            opt(ratio(pa.primary(), pb.primary()), 3),
            pa.unit()
        );
    }
    let rows = [
        ("score BW (GiB/s)", a.score.bw_gib_s, b.score.bw_gib_s),
        ("score MD (kIOPS)", a.score.md_kiops, b.score.md_kiops),
        ("score", a.score.score, b.score.score),
    ];
    for (name, x, y) in rows {
        let r = match (x, y) {
            (Some(x), Some(y)) => ratio(x, y),
            _ => None,
        };
        let _ = writeln!(
            s,
            "{:<20} {:>14} {:>14} {:>8}",
            name,
            opt(x, 3),
            opt(y, 3),
            opt(r, 3)
        );
    }
    s
}

/// The suite's table: each phase of `base` and of every run in `others`, then the ratio of
/// each of them to `base` (columns e.g. raw, eddy, eddy-lib, eddy/raw, eddy-lib/raw).
pub fn ratios_table(base: &Report, others: &[&Report]) -> String {
    let mut s = String::new();
    let names: Vec<&str> = others.iter().map(|r| r.label.as_str()).collect();
    let _ = writeln!(
        s,
        "{} vs {} (ratio = run / {})",
        names.join(", "),
        base.label,
        base.label
    );
    let ratio_names: Vec<String> = names
        .iter()
        .map(|n| format!("{n}/{}", base.label))
        .collect();
    let w = |t: &str| t.len().max(12);
    let _ = write!(s, "{:<20} {:>w$}", "phase", base.label, w = w(&base.label));
    for n in &names {
        let _ = write!(s, " {:>w$}", n, w = w(n));
    }
    for n in &ratio_names {
        let _ = write!(s, " {:>w$}", n, w = w(n));
    }
    let _ = writeln!(s, " {:>6}", "unit");
    for pa in &base.phases {
        let found: Vec<Option<f64>> = others
            .iter()
            .map(|r| {
                r.phases
                    .iter()
                    .find(|p| p.phase == pa.phase)
                    .map(PhaseResult::primary)
            })
            .collect();
        let a = pa.primary();
        let _ = write!(s, "{:<20} {:>w$.2}", pa.phase.name(), a, w = w(&base.label));
        for (v, n) in found.iter().zip(&names) {
            let _ = write!(s, " {:>w$}", opt(*v, 2), w = w(n));
        }
        for (v, n) in found.iter().zip(&ratio_names) {
            let _ = write!(s, " {:>w$}", opt(v.and_then(|v| ratio(a, v)), 3), w = w(n));
        }
        let _ = writeln!(s, " {:>6}", pa.unit());
    }
    type Part = fn(&Score) -> Option<f64>;
    let rows: [(&str, Part); 3] = [
        ("score BW (GiB/s)", |x| x.bw_gib_s),
        ("score MD (kIOPS)", |x| x.md_kiops),
        ("score", |x| x.score),
    ];
    for (name, part) in rows {
        let a = part(&base.score);
        let _ = write!(s, "{:<20} {:>w$}", name, opt(a, 3), w = w(&base.label));
        let vals: Vec<Option<f64>> = others.iter().map(|r| part(&r.score)).collect();
        for (v, n) in vals.iter().zip(&names) {
            let _ = write!(s, " {:>w$}", opt(*v, 3), w = w(n));
        }
        for (v, n) in vals.iter().zip(&ratio_names) {
            let r = match (a, v) {
                (Some(a), Some(v)) => ratio(a, *v),
                _ => None,
            };
            let _ = write!(s, " {:>w$}", opt(r, 3), w = w(n));
        }
        s.push('\n');
    }
    s
}

/// One row per phase, one column per run (e.g. per process count), primary metric.
pub fn scale_table(runs: &[Report]) -> String {
    let mut s = String::new();
    let _ = write!(s, "{:<20} {:>6}", "phase", "unit");
    for r in runs {
        let _ = write!(s, " {:>12}", r.label);
    }
    s.push('\n');
    let Some(first) = runs.first() else { return s };
    for p in &first.phases {
        let _ = write!(s, "{:<20} {:>6}", p.phase.name(), p.unit());
        for r in runs {
            let v = r
                .phases
                .iter()
                .find(|q| q.phase == p.phase)
                .map(PhaseResult::primary);
            let _ = write!(s, " {:>12}", opt(v, 2));
        }
        s.push('\n');
    }
    let _ = write!(s, "{:<20} {:>6}", "score", "");
    for r in runs {
        let _ = write!(s, " {:>12}", opt(r.score.score, 3));
    }
    s.push('\n');
    s
}

/// The runs of several rounds of the same runs (`eddy bench suite --rounds`) as one: per
/// label (in the first round's order) and phase, the median of the rounds' figures (each
/// figure on its own: bandwidth, IOPS, time, latencies); the score from those medians. One
/// round is returned as it is.
pub fn median_of_rounds(rounds: &[Vec<Report>]) -> Vec<Report> {
    let Some((first, rest)) = rounds.split_first() else {
        return Vec::new();
    };
    if rest.is_empty() {
        return first.clone();
    }
    let median = |mut v: Vec<f64>| -> f64 {
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    };
    first
        .iter()
        .map(|base| {
            let same: Vec<&Report> = rounds
                .iter()
                .filter_map(|r| r.iter().find(|x| x.label == base.label))
                .collect();
            let phases: Vec<PhaseResult> = base
                .phases
                .iter()
                .map(|p| {
                    let of: Vec<&PhaseResult> = same
                        .iter()
                        .filter_map(|r| r.phases.iter().find(|q| q.phase == p.phase))
                        .collect();
                    let pick =
                        |f: fn(&PhaseResult) -> f64| median(of.iter().map(|q| f(q)).collect());
                    let opt = |f: fn(&PhaseResult) -> Option<f64>| {
                        let v: Vec<f64> = of.iter().filter_map(|q| f(q)).collect();
                        (!v.is_empty()).then(|| median(v))
                    };
                    PhaseResult {
                        seconds: pick(|q| q.seconds),
                        mib_s: pick(|q| q.mib_s),
                        kiops: pick(|q| q.kiops),
                        p50_us: opt(|q| q.p50_us),
                        p99_us: opt(|q| q.p99_us),
                        ..p.clone()
                    }
                })
                .collect();
            Report {
                score: Score::of(&phases),
                phases,
                ..base.clone()
            }
        })
        .collect()
}

/// With rounds of variants (`eddy bench suite --variant … --rounds N`, N ≥ 2): per way in
/// (mount, library, preload) and later variant, per phase, the median over the rounds of the
/// ratio to the first variant in the same round, with the rounds' lowest and highest. A
/// round's two runs are measured minutes apart at most, so this ratio is less exposed to
/// drift than the ratio of the medians; both are printed. Empty without rounds or variants.
pub fn paired_ratios(rounds: &[Vec<Report>]) -> String {
    let mut s = String::new();
    let Some(first) = rounds.first() else {
        return s;
    };
    if rounds.len() < 2 {
        return s;
    }
    // Labels `way[variant]`: the first variant is the one of the first labelled run.
    let split = |l: &str| -> Option<(String, String)> {
        let (way, v) = l.strip_suffix(']')?.rsplit_once('[')?;
        Some((way.to_string(), v.to_string()))
    };
    let Some((_, base)) = first.iter().find_map(|r| split(&r.label)) else {
        return s;
    };
    for r in first {
        let Some((way, variant)) = split(&r.label) else {
            continue;
        };
        if variant == base {
            continue;
        }
        let base_label = format!("{way}[{base}]");
        let _ = writeln!(
            s,
            "\n{} / {} paired by round (median of {} rounds, lowest..highest)",
            r.label,
            base_label,
            rounds.len()
        );
        for p in &r.phases {
            let mut ratios: Vec<f64> = rounds
                .iter()
                .filter_map(|round| {
                    let get = |l: &str| {
                        round
                            .iter()
                            .find(|x| x.label == l)?
                            .phases
                            .iter()
                            .find(|q| q.phase == p.phase)
                            .map(PhaseResult::primary)
                    };
                    let (a, b) = (get(&r.label)?, get(&base_label)?);
                    (b > 0.0).then(|| a / b)
                })
                .collect();
            if ratios.is_empty() {
                continue;
            }
            ratios.sort_by(f64::total_cmp);
            let n = ratios.len();
            let median = if n % 2 == 1 {
                ratios[n / 2]
            } else {
                (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0
            };
            let _ = writeln!(
                s,
                "{:<20} {:>7.3}  ({:.2}..{:.2})",
                p.phase.name(),
                median,
                ratios[0],
                ratios[n - 1]
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hist::Histogram;
    use std::time::Duration;

    fn phase(phase: Phase, bytes: u64, ops: u64, secs: f64) -> PhaseResult {
        let mut latency = Histogram::default();
        latency.record(Duration::from_micros(100));
        PhaseResult::new(
            phase,
            &PhaseStats {
                ops,
                bytes,
                matches: 0,
                items: None,
                latency,
            },
            secs,
        )
    }

    #[test]
    fn score_is_io500_arithmetic() {
        let g = 1u64 << 30;
        let phases = vec![
            phase(Phase::IorEasyWrite, 4 * g, 10, 1.0),    // 4 GiB/s
            phase(Phase::IorHardRead, g, 10, 1.0),         // 1 GiB/s
            phase(Phase::MdtestEasyWrite, 0, 9000, 1.0),   // 9 kIOPS
            phase(Phase::Find, 0, 1000, 1.0),              // 1 kIOPS
            phase(Phase::Rnd4kRead, 4096, 1_000_000, 1.0), // extra: ignored
        ];
        let s = Score::of(&phases);
        assert!((s.bw_gib_s.unwrap() - 2.0).abs() < 1e-9);
        assert!((s.md_kiops.unwrap() - 3.0).abs() < 1e-9);
        assert!((s.score.unwrap() - 6f64.sqrt()).abs() < 1e-9);
        assert!((phases[0].mib_s - 4096.0).abs() < 1e-9);
        assert!((phases[2].kiops - 9.0).abs() < 1e-9);
    }

    #[test]
    fn score_parts_missing_or_zero() {
        let only_md = Score::of(&[phase(Phase::Find, 0, 10, 1.0)]);
        assert_eq!(only_md.bw_gib_s, None);
        assert_eq!(only_md.score, None);
        assert!(only_md.md_kiops.is_some());
        assert_eq!(geomean(&[1.0, 0.0]), None);
        assert_eq!(geomean(&[]), None);
        assert!((geomean(&[2.0, 8.0]).unwrap() - 4.0).abs() < 1e-12);
    }

    fn report(label: &str, factor: f64) -> Report {
        let phases = vec![
            phase(
                Phase::IorEasyWrite,
                (100.0 * factor) as u64 * 1024 * 1024,
                50,
                1.0,
            ),
            phase(Phase::MdtestHardStat, 0, (2000.0 * factor) as u64, 1.0),
        ];
        Report {
            label: label.into(),
            target: "/t".into(),
            procs: 2,
            started_unix: 1,
            options: crate::plan::tests_support::default_opts(),
            score: Score::of(&phases),
            phases,
        }
    }

    #[test]
    fn rounds_become_the_median_of_each_figure() {
        let rounds: Vec<Vec<Report>> = [1.0, 3.0, 2.0]
            .iter()
            .map(|k| vec![report("raw", 1.0), report("eddy", *k)])
            .collect();
        let m = median_of_rounds(&rounds);
        assert_eq!(
            m.iter().map(|r| r.label.as_str()).collect::<Vec<_>>(),
            ["raw", "eddy"]
        );
        assert_eq!(m[0], rounds[0][0], "the same figures every round");
        let two = report("eddy", 2.0);
        for (p, want) in m[1].phases.iter().zip(&two.phases) {
            assert!((p.primary() - want.primary()).abs() < 1e-9, "{p:?}");
        }
        assert_eq!(m[1].score, two.score);
        assert_eq!(median_of_rounds(&rounds[..1]), rounds[0]);
        // Paired: eddy[b] against eddy[a] of the same round.
        let paired: Vec<Vec<Report>> = [(1.0, 2.0), (1.0, 1.0), (2.0, 1.0)]
            .iter()
            .map(|(a, b)| vec![report("eddy[a]", *a), report("eddy[b]", *b)])
            .collect();
        let text = paired_ratios(&paired);
        assert!(
            text.contains("eddy[b] / eddy[a] paired by round (median of 3 rounds"),
            "{text}"
        );
        assert!(text.contains("1.000  (0.50..2.00)"), "{text}");
        assert_eq!(paired_ratios(&paired[..1]), "");
    }

    #[test]
    fn json_round_trip_and_format_check() {
        let f = ResultsFile::new(vec![report("raw", 1.0), report("eddy", 0.5)]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        f.save(&path).unwrap();
        assert_eq!(ResultsFile::load(&path).unwrap(), f);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"phase\": \"ior-easy-write\""), "{text}");
        assert!(text.contains("\"kind\": \"bw\""));
        std::fs::write(&path, text.replace(FORMAT, "other/9")).unwrap();
        assert!(ResultsFile::load(&path).is_err());
    }

    #[test]
    fn ratios_table_has_a_column_per_run_and_per_ratio() {
        let (raw, mnt, lib) = (
            report("raw", 1.0),
            report("eddy", 0.5),
            report("eddy-lib", 0.25),
        );
        let t = ratios_table(&raw, &[&mnt, &lib]);
        let header = t.lines().nth(1).unwrap();
        for col in [
            "raw",
            "eddy",
            "eddy-lib",
            "eddy/raw",
            "eddy-lib/raw",
            "unit",
        ] {
            assert!(header.split_whitespace().any(|c| c == col), "{col}: {t}");
        }
        let line = t.lines().find(|l| l.starts_with("ior-easy-write")).unwrap();
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells[4], "0.500", "{t}");
        assert_eq!(cells[5], "0.250", "{t}");
        assert_eq!(cells[6], "MiB/s", "{t}");
        let score = t.lines().find(|l| l.starts_with("score MD")).unwrap();
        assert!(score.contains("0.500") && score.contains("0.250"), "{t}");
    }

    #[test]
    fn compare_prints_ratios() {
        let t = compare_table(&report("raw", 1.0), &report("eddy", 0.5));
        let line = t.lines().find(|l| l.starts_with("ior-easy-write")).unwrap();
        assert!(line.contains("0.500"), "{t}");
        let line = t
            .lines()
            .find(|l| l.starts_with("mdtest-hard-stat"))
            .unwrap();
        assert!(line.contains("0.500") && line.contains("kIOPS"), "{t}");
    }
}
