//! The resolved plan of a run: phases, file layout, and sizes after `--scale`. The plan is
//! computed once by the coordinator and sent to every worker, so all ranks agree on which
//! rank writes which bytes where.

use crate::args::{IoMode, Readback, Workload, WorkloadOpts};
use crate::fs::Target;
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Name of the work directory created inside the benchmarked directory.
pub const WORK_DIR: &str = "eddy-bench.work";
/// The manifest that lets a later `--phases read` run check it uses the same plan.
pub const MANIFEST: &str = "manifest.json";
/// Reference file of the find phase (its mtime is the "newer than" bound).
pub const FIND_REF: &str = "find.ref";
/// Size of an rnd4k read.
pub const RND_READ: u64 = 4096;

/// How a phase's throughput counts in the IO500-style score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Bandwidth phase: MiB/s, part of the BW score.
    Bw,
    /// Metadata phase: kIOPS, part of the MD score.
    Md,
    /// Extra phase (not in the score), reported in kIOPS.
    Iops,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    IorEasyWrite,
    MdtestEasyWrite,
    IorHardWrite,
    MdtestHardWrite,
    SmallfilesWrite,
    Find,
    IorEasyRead,
    Rnd4kRead,
    MdtestEasyStat,
    IorHardRead,
    MdtestHardStat,
    MdtestEasyDelete,
    MdtestHardRead,
    MdtestHardDelete,
    SmallfilesRead,
}

impl Phase {
    /// Every phase, in the order they run (IO500's order, extras inserted).
    pub const ALL: [Phase; 15] = [
        Phase::IorEasyWrite,
        Phase::MdtestEasyWrite,
        Phase::IorHardWrite,
        Phase::MdtestHardWrite,
        Phase::SmallfilesWrite,
        Phase::Find,
        Phase::IorEasyRead,
        Phase::Rnd4kRead,
        Phase::MdtestEasyStat,
        Phase::IorHardRead,
        Phase::MdtestHardStat,
        Phase::MdtestEasyDelete,
        Phase::MdtestHardRead,
        Phase::MdtestHardDelete,
        Phase::SmallfilesRead,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Phase::IorEasyWrite => "ior-easy-write",
            Phase::MdtestEasyWrite => "mdtest-easy-write",
            Phase::IorHardWrite => "ior-hard-write",
            Phase::MdtestHardWrite => "mdtest-hard-write",
            Phase::SmallfilesWrite => "smallfiles-write",
            Phase::Find => "find",
            Phase::IorEasyRead => "ior-easy-read",
            Phase::Rnd4kRead => "rnd4k-read",
            Phase::MdtestEasyStat => "mdtest-easy-stat",
            Phase::IorHardRead => "ior-hard-read",
            Phase::MdtestHardStat => "mdtest-hard-stat",
            Phase::MdtestEasyDelete => "mdtest-easy-delete",
            Phase::MdtestHardRead => "mdtest-hard-read",
            Phase::MdtestHardDelete => "mdtest-hard-delete",
            Phase::SmallfilesRead => "smallfiles-read",
        }
    }

    pub fn from_name(name: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.name() == name)
    }

    pub fn workload(self) -> Workload {
        match self {
            Phase::IorEasyWrite | Phase::IorEasyRead => Workload::IorEasy,
            Phase::IorHardWrite | Phase::IorHardRead => Workload::IorHard,
            Phase::MdtestEasyWrite | Phase::MdtestEasyStat | Phase::MdtestEasyDelete => {
                Workload::MdtestEasy
            }
            Phase::MdtestHardWrite
            | Phase::MdtestHardStat
            | Phase::MdtestHardRead
            | Phase::MdtestHardDelete => Workload::MdtestHard,
            Phase::Find => Workload::Find,
            Phase::Rnd4kRead => Workload::Rnd4k,
            Phase::SmallfilesWrite | Phase::SmallfilesRead => Workload::Smallfiles,
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            Phase::IorEasyWrite | Phase::IorEasyRead | Phase::IorHardWrite | Phase::IorHardRead => {
                Kind::Bw
            }
            Phase::Rnd4kRead | Phase::SmallfilesWrite | Phase::SmallfilesRead => Kind::Iops,
            _ => Kind::Md,
        }
    }

    /// True for the phases that create the files the other phases use.
    pub fn creates(self) -> bool {
        matches!(
            self,
            Phase::IorEasyWrite
                | Phase::MdtestEasyWrite
                | Phase::IorHardWrite
                | Phase::MdtestHardWrite
                | Phase::SmallfilesWrite
        )
    }
}

/// Parses `--phases`: `all`, `write`, `read` or a comma list of phase names.
pub fn select_phases(spec: &str, workloads: &[Workload]) -> anyhow::Result<Vec<Phase>> {
    let wanted: Vec<Phase> = match spec.trim() {
        "all" => Phase::ALL.to_vec(),
        "write" => Phase::ALL.into_iter().filter(|p| p.creates()).collect(),
        "read" => Phase::ALL.into_iter().filter(|p| !p.creates()).collect(),
        list => {
            let mut v = Vec::new();
            for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                match Phase::from_name(name) {
                    Some(p) => v.push(p),
                    None => bail!(
                        "unknown phase {name:?}; phases are all, write, read or any of: {}",
                        Phase::ALL.map(Phase::name).join(", ")
                    ),
                }
            }
            v
        }
    };
    let phases: Vec<Phase> = Phase::ALL
        .into_iter()
        .filter(|p| wanted.contains(p) && workloads.contains(&p.workload()))
        .collect();
    if phases.is_empty() {
        bail!("--phases {spec:?} selects no phase of the chosen --workloads");
    }
    Ok(phases)
}

/// Sizes after `--scale`: counts per rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sizes {
    pub easy_xfers: u64,
    pub hard_xfers: u64,
    pub md_easy_files: u64,
    pub md_hard_files: u64,
    pub rnd4k_ops: u64,
    pub small_files: u64,
}

fn scaled(n: u64, scale: f64) -> u64 {
    ((n as f64 * scale).round() as u64).max(1)
}

impl Sizes {
    pub fn new(o: &WorkloadOpts) -> Sizes {
        Sizes {
            easy_xfers: scaled(o.easy_bytes, o.scale)
                .div_ceil(o.easy_xfer.max(1))
                .max(1),
            hard_xfers: scaled(o.hard_segments, o.scale),
            md_easy_files: scaled(o.md_easy_files, o.scale),
            md_hard_files: scaled(o.md_hard_files, o.scale),
            rnd4k_ops: scaled(o.rnd4k_ops, o.scale),
            small_files: scaled(o.small_files, o.scale),
        }
    }
}

/// The layout of one IOR workload: which rank writes which transfer where.
#[derive(Debug, Clone, Copy)]
pub struct Ior {
    pub dir: &'static str,
    pub mode: IoMode,
    pub xfer: u64,
    /// Transfers per writing rank (after a stonewall: the count reached).
    pub count: u64,
    /// Transfers per rank as planned: the stride of the n-1 block layout, so that offsets do
    /// not depend on where a stonewall stopped.
    pub stride: u64,
    pub procs: u32,
    /// n-1 layout: transfers interleaved by rank (IOR segments) rather than one block per rank.
    pub interleaved: bool,
    /// Whose data a rank reads back.
    pub readback: Readback,
}

/// The rank whose files `reader` reads back, of `procs`.
fn readback_of(readback: Readback, reader: u32, procs: u32) -> u32 {
    match readback {
        Readback::Next => (reader + 1) % procs.max(1),
        Readback::Own => reader,
    }
}

impl Ior {
    pub fn writers(&self) -> Vec<u32> {
        match self.mode {
            IoMode::OneOne => vec![0],
            _ => (0..self.procs).collect(),
        }
    }

    pub fn writes(&self, rank: u32) -> bool {
        self.mode != IoMode::OneOne || rank == 0
    }

    /// The file written by `writer`, relative to the work directory.
    pub fn file(&self, writer: u32) -> String {
        match self.mode {
            IoMode::NN => format!("{}/file.{writer}", self.dir),
            IoMode::N1 => format!("{}/shared", self.dir),
            IoMode::OneOne => format!("{}/single", self.dir),
        }
    }

    /// File offset of transfer `i` of `writer`.
    pub fn offset(&self, writer: u32, i: u64) -> u64 {
        let w = u64::from(writer);
        let n = u64::from(self.procs);
        match (self.mode, self.interleaved) {
            (IoMode::N1, true) => (i * n + w) * self.xfer,
            (IoMode::N1, false) => (w * self.stride + i) * self.xfer,
            _ => i * self.xfer,
        }
    }

    /// Whose data `reader` reads back: the next rank's (so no rank reads its own writes from
    /// a client cache, like IOR's reordered tasks) or, with `--readback own`, its own; nobody
    /// in 1-1 mode except rank 0.
    pub fn source(&self, reader: u32) -> Option<u32> {
        match self.mode {
            IoMode::OneOne => (reader == 0).then_some(0),
            _ => Some(readback_of(self.readback, reader, self.procs)),
        }
    }

    /// The files of this workload and their sizes.
    pub fn files(&self) -> Vec<(String, u64)> {
        let per = self.count * self.xfer;
        let n = u64::from(self.procs);
        match self.mode {
            IoMode::NN => self
                .writers()
                .into_iter()
                .map(|w| (self.file(w), per))
                .collect(),
            IoMode::N1 if self.interleaved => vec![(self.file(0), per * n)],
            IoMode::N1 => vec![(
                self.file(0),
                ((n - 1) * self.stride + self.count) * self.xfer,
            )],
            IoMode::OneOne => vec![(self.file(0), per)],
        }
    }
}

/// Everything a worker needs to run its part of the phases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// What is benchmarked (local paths absolute).
    pub target: Target,
    /// The work directory (absolute, a path of the target's file system).
    pub work: PathBuf,
    pub procs: u32,
    pub opts: WorkloadOpts,
    pub sizes: Sizes,
    pub phases: Vec<Phase>,
    /// Seconds after which creating phases stop (0 = never).
    pub stonewall_s: f64,
    /// Directories of the work directory (as `dirs` names them) made with
    /// `user.eddy.placement = hashed` (decision 0047: the suite's shared file under
    /// `placement = "local"`).
    #[serde(default)]
    pub hashed_dirs: Vec<String>,
}

impl Plan {
    pub fn new(target: &Target, opts: &WorkloadOpts, phases: &str) -> anyhow::Result<Plan> {
        if opts.procs == 0 {
            bail!("--procs must be at least 1");
        }
        if !(opts.scale > 0.0 && opts.scale.is_finite()) {
            bail!("--scale must be a positive number");
        }
        if opts.easy_xfer == 0 || opts.hard_xfer == 0 {
            bail!("transfer sizes must be at least 1 byte");
        }
        let w = &opts.workloads;
        if w.contains(&Workload::Rnd4k) && !w.contains(&Workload::IorEasy) {
            bail!("rnd4k reads the files of ior-easy: add ior-easy to --workloads");
        }
        let stonewall_s = opts.stonewall.unwrap_or(0.0);
        if !(stonewall_s >= 0.0 && stonewall_s.is_finite()) {
            bail!("--stonewall must be a number of seconds, 0 for none");
        }
        let target = target
            .absolute()
            .with_context(|| format!("cannot resolve {target}"))?;
        if let Target::Eddy { dir, .. } | Target::Preload { dir, .. } | Target::C { dir, .. } =
            &target
        {
            if !dir.starts_with('/') {
                bail!("{target}: the directory in the namespace must be absolute");
            }
        }
        Ok(Plan {
            work: target.dir().join(WORK_DIR),
            target,
            procs: opts.procs,
            opts: opts.clone(),
            sizes: Sizes::new(opts),
            phases: select_phases(phases, &opts.workloads)?,
            stonewall_s,
            hashed_dirs: Vec::new(),
        })
    }

    /// Records how many items a creating phase made per rank (after a stonewall).
    pub fn set_items(&mut self, phase: Phase, items: u64) {
        let s = &mut self.sizes;
        match phase {
            Phase::IorEasyWrite => s.easy_xfers = items,
            Phase::IorHardWrite => s.hard_xfers = items,
            Phase::MdtestEasyWrite => s.md_easy_files = items,
            Phase::MdtestHardWrite => s.md_hard_files = items,
            Phase::SmallfilesWrite => s.small_files = items,
            _ => {}
        }
    }

    pub fn has(&self, w: Workload) -> bool {
        self.opts.workloads.contains(&w)
    }

    pub fn ior_easy(&self) -> Ior {
        Ior {
            dir: "ior-easy",
            mode: self.opts.easy_mode,
            xfer: self.opts.easy_xfer,
            count: self.sizes.easy_xfers,
            stride: Sizes::new(&self.opts).easy_xfers,
            procs: self.procs,
            interleaved: false,
            readback: self.opts.readback,
        }
    }

    pub fn ior_hard(&self) -> Ior {
        Ior {
            dir: "ior-hard",
            mode: self.opts.hard_mode,
            xfer: self.opts.hard_xfer,
            count: self.sizes.hard_xfers,
            stride: Sizes::new(&self.opts).hard_xfers,
            procs: self.procs,
            interleaved: true,
            readback: self.opts.readback,
        }
    }

    /// The rank whose files `rank` stats or reads back (the next one, or with `--readback
    /// own` itself).
    pub fn shifted(&self, rank: u32) -> u32 {
        readback_of(self.opts.readback, rank, self.procs)
    }

    pub fn md_easy_file(rank: u32, i: u64) -> String {
        format!("mdt-easy/r{rank}/f{i}")
    }

    pub fn md_hard_file(rank: u32, i: u64) -> String {
        format!("mdt-hard/f.{rank}.{i}")
    }

    pub fn small_file(rank: u32, i: u64) -> String {
        format!("small/r{rank}/s{i}")
    }

    /// Directories created before the first phase (relative to the work directory).
    /// The directory of ior-hard's shared file (`dirs`' name), if the plan runs ior-hard.
    pub fn shared_file_dir(&self) -> Option<&'static str> {
        self.has(Workload::IorHard).then_some("ior-hard")
    }

    pub fn dirs(&self) -> Vec<String> {
        let mut d = Vec::new();
        if self.has(Workload::IorEasy) {
            d.push("ior-easy".to_string());
        }
        if self.has(Workload::IorHard) {
            d.push("ior-hard".to_string());
        }
        if self.has(Workload::MdtestEasy) {
            d.push("mdt-easy".to_string());
            d.extend((0..self.procs).map(|r| format!("mdt-easy/r{r}")));
        }
        if self.has(Workload::MdtestHard) {
            d.push("mdt-hard".to_string());
        }
        if self.has(Workload::Smallfiles) {
            d.push("small".to_string());
            d.extend((0..self.procs).map(|r| format!("small/r{r}")));
        }
        d
    }

    /// Every file the creating phases make, with its size.
    pub fn files(&self) -> Vec<(String, u64)> {
        let mut f = Vec::new();
        if self.has(Workload::IorEasy) {
            f.extend(self.ior_easy().files());
        }
        if self.has(Workload::IorHard) {
            f.extend(self.ior_hard().files());
        }
        for r in 0..self.procs {
            if self.has(Workload::MdtestEasy) {
                f.extend((0..self.sizes.md_easy_files).map(|i| (Plan::md_easy_file(r, i), 0)));
            }
            if self.has(Workload::MdtestHard) {
                let n = self.opts.md_hard_bytes;
                f.extend((0..self.sizes.md_hard_files).map(|i| (Plan::md_hard_file(r, i), n)));
            }
            if self.has(Workload::Smallfiles) {
                let n = self.opts.small_bytes;
                f.extend((0..self.sizes.small_files).map(|i| (Plan::small_file(r, i), n)));
            }
        }
        f
    }

    /// Bytes needed on the target, with room for block rounding.
    pub fn space_needed(&self) -> u64 {
        self.files()
            .iter()
            .map(|(_, n)| n.div_ceil(4096) * 4096 + 4096)
            .sum()
    }

    /// The find phase's criteria: name contains this, size equals `find_size`, newer than ref.
    pub const FIND_NAME: &'static str = "01";

    pub fn find_size(&self) -> u64 {
        self.opts.md_hard_bytes
    }

    /// How many files the find phase must match.
    pub fn find_expected(&self) -> u64 {
        self.files()
            .iter()
            .filter(|(path, size)| {
                let name = path.rsplit('/').next().unwrap_or(path);
                name.contains(Plan::FIND_NAME) && *size == self.find_size()
            })
            .count() as u64
    }
}

#[cfg(test)]
pub mod tests_support {
    use crate::args::{BenchArgs, BenchCommand, WorkloadOpts};
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Top,
    }
    #[derive(clap::Subcommand)]
    enum Top {
        Bench(BenchArgs),
    }

    pub fn opts(extra: &[&str]) -> WorkloadOpts {
        let mut argv = vec!["x", "bench", "run", "/tmp"];
        argv.extend_from_slice(extra);
        let Top::Bench(b) = Cli::parse_from(argv).cmd;
        match b.command {
            BenchCommand::Run(r) => r.work,
            _ => unreachable!(),
        }
    }

    pub fn default_opts() -> WorkloadOpts {
        opts(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::opts;
    use super::*;

    fn tmp() -> Target {
        Target::Dir("/tmp".into())
    }

    #[test]
    fn shared_file_layouts_cover_every_transfer_once() {
        for interleaved in [true, false] {
            let ior = Ior {
                dir: "d",
                mode: IoMode::N1,
                xfer: 10,
                count: 4,
                stride: 4,
                procs: 3,
                interleaved,
                readback: Readback::Next,
            };
            let mut offs: Vec<u64> = (0..3)
                .flat_map(|w| (0..4).map(move |i| (w, i)))
                .map(|(w, i)| ior.offset(w, i))
                .collect();
            offs.sort_unstable();
            assert_eq!(offs, (0..12).map(|k| k * 10).collect::<Vec<_>>());
            assert_eq!(ior.files(), vec![("d/shared".to_string(), 120)]);
        }
    }

    #[test]
    fn stonewalled_block_layout_keeps_planned_offsets() {
        let ior = Ior {
            dir: "d",
            mode: IoMode::N1,
            xfer: 10,
            count: 2,
            stride: 5,
            procs: 2,
            interleaved: false,
            readback: Readback::Next,
        };
        assert_eq!(ior.offset(1, 0), 50);
        assert_eq!(ior.offset(1, 1), 60);
        assert_eq!(ior.files(), vec![("d/shared".to_string(), 70)]);
    }

    #[test]
    fn one_one_mode_has_a_single_writer_and_reader() {
        let ior = Ior {
            dir: "d",
            mode: IoMode::OneOne,
            xfer: 4,
            count: 2,
            stride: 2,
            procs: 4,
            interleaved: true,
            readback: Readback::Own,
        };
        assert_eq!(ior.writers(), vec![0]);
        assert_eq!(ior.source(0), Some(0));
        assert_eq!(ior.source(2), None);
        assert!(!ior.writes(1));
    }

    #[test]
    fn readback_is_the_next_ranks_or_its_own() {
        let next = Plan::new(&tmp(), &opts(&["--procs", "3"]), "all").unwrap();
        assert_eq!(next.opts.readback, Readback::Next);
        assert_eq!(
            (0..3).map(|r| next.shifted(r)).collect::<Vec<_>>(),
            [1, 2, 0]
        );
        assert_eq!(next.ior_easy().source(2), Some(0));
        let own = Plan::new(&tmp(), &opts(&["--procs", "3", "--readback", "own"]), "all").unwrap();
        assert_eq!(
            (0..3).map(|r| own.shifted(r)).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(own.ior_easy().source(2), Some(2));
        assert_eq!(own.ior_hard().source(1), Some(1));
        // Results files written before the option existed read as `next`.
        let mut v = serde_json::to_value(&own.opts).unwrap();
        v.as_object_mut().unwrap().remove("readback");
        let old: WorkloadOpts = serde_json::from_value(v).unwrap();
        assert_eq!(old.readback, Readback::Next);
    }

    #[test]
    fn phases_select_by_group_and_workload() {
        let o = opts(&["--workloads", "mdtest-easy,find"]);
        let w = select_phases("write", &o.workloads).unwrap();
        assert_eq!(w, vec![Phase::MdtestEasyWrite]);
        let r = select_phases("read", &o.workloads).unwrap();
        assert_eq!(
            r,
            vec![Phase::Find, Phase::MdtestEasyStat, Phase::MdtestEasyDelete]
        );
        assert!(select_phases("bogus", &o.workloads).is_err());
        assert!(select_phases("ior-easy-write", &o.workloads).is_err());
    }

    #[test]
    fn scale_and_find_expectation() {
        let o = opts(&["--scale", "0.1", "--procs", "2"]);
        let plan = Plan::new(&tmp(), &o, "all").unwrap();
        assert_eq!(plan.sizes.md_hard_files, 200);
        assert_eq!(plan.sizes.easy_xfers, 7); // 12.8 MiB in 2 MiB transfers, rounded up
                                              // Names of mdtest-hard files containing "01", counted independently of the plan.
        let by_hand = (0..2u32)
            .flat_map(|r| (0..200u64).map(move |i| format!("f.{r}.{i}")))
            .filter(|n| n.contains("01"))
            .count() as u64;
        assert_eq!(plan.find_expected(), by_hand);
        let big = Plan::new(&tmp(), &opts(&["--procs", "2"]), "all").unwrap();
        assert!(big.find_expected() > 0);
        assert!(Plan::new(&tmp(), &opts(&["--workloads", "rnd4k"]), "all").is_err());
    }
}
