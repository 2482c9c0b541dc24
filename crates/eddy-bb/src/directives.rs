//! The `#EDDY` lines of a batch script: what a job asks of its burst buffer.
//!
//! One directive per line; a line is `#EDDY` followed by words. Options are `key=value`
//! words (several may share a line); the verbs `link`, `stage_in`, `prefetch` and
//! `stage_out` take one line each. Every problem is reported with its line number, all of them at once, so that
//! `sbatch` can refuse the script with one message the user can act on.
//!
//! `job_process` runs inside slurmctld, so parsing is linear in the script and bounded: at
//! most `MAX_LINES` directive lines of at most `MAX_LINE_BYTES` bytes, `MAX_LINKS` links and
//! `MAX_STAGED` staged or prefetched trees; overlaps are found on sorted prefixes. Directives are read
//! where Slurm reads them: up to the script's first line that is not a comment (Slurm
//! charges the capacity it finds there and stops), and a directive below that line is an
//! error, so that what Eddy obeys is what Slurm charged.
//!
//! Slurm reads two of the words itself: `capacity=` and `pool=`, which must share a line
//! (Slurm charges the capacity to the pool), with a whole number of bytes and an optional
//! K/M/G/T/P suffix (powers of 1024). The pool names the mode: `node-local`, or the site's
//! I/O-node pool.
//!
//! ```text
//! #EDDY capacity=200G pool=node-local chunk_size=1MiB
//! #EDDY link /data=/pfs/project/run7
//! #EDDY stage_in /data/inputs pin
//! #EDDY prefetch /data/restart
//! #EDDY stage_out /data/results
//! ```

use eddy_config::{parse_bytes, Link};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Where the job's daemons run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// One daemon on each of the job's own nodes, on their local storage (started in
    /// pre_run, when the nodes are known).
    NodeLocal,
    /// Daemons on the site's I/O nodes, started and staged in while the job is pending.
    Pool,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::NodeLocal => "node-local",
            Mode::Pool => "pool",
        }
    }
}

/// A tree to fetch before the job runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageIn {
    /// Namespace path under a linked prefix.
    pub path: String,
    /// Keep it from eviction for the whole job.
    pub pin: bool,
}

/// Everything the `#EDDY` lines of one script ask for; unset options take the site's
/// defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRequest {
    /// Bytes of burst buffer storage the job needs, over all its daemons.
    pub capacity: Option<u64>,
    /// The Slurm pool charged with the capacity: `node-local` or the site's I/O pool.
    pub pool: Option<String>,
    pub mode: Option<Mode>,
    pub chunk_size: Option<u64>,
    /// Pool mode: how many I/O nodes (default: the site's).
    pub nodes: Option<u32>,
    pub links: Vec<Link>,
    pub stage_in: Vec<StageIn>,
    /// Trees fetched into the cache beside the job, which does not wait for them (decision
    /// 0071): started once the job's deployment is up and its stage-in done.
    #[serde(default)]
    pub prefetch: Vec<String>,
    /// Trees written back after the job; none listed means every linked prefix.
    pub stage_out: Vec<String>,
}

/// The problems found in a script's directives, each with its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectiveErrors(pub Vec<(usize, String)>);

impl fmt::Display for DirectiveErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(line, msg)| format!("#EDDY line {line}: {msg}"))
            .collect();
        f.write_str(&parts.join("; "))
    }
}

impl std::error::Error for DirectiveErrors {}

/// Option names, for the message about an unknown one.
const OPTIONS: &str = "capacity, pool, mode, chunk_size, nodes";
/// Verbs, likewise.
const VERBS: &str = "link, stage_in, prefetch, stage_out";

/// Most directive lines a script may have.
pub const MAX_LINES: usize = 1000;
/// Longest directive line, in bytes.
pub const MAX_LINE_BYTES: usize = 4096;
/// Most `link` lines.
pub const MAX_LINKS: usize = 64;
/// Most `stage_in`, `prefetch` and `stage_out` lines together.
pub const MAX_STAGED: usize = 256;
/// Most problems reported one by one; the rest are counted.
const MAX_REPORTED: usize = 20;

/// Parses the `#<directive>` lines of `script` (the directive word is the site's
/// `Directive=` of burst_buffer.conf, `EDDY` by default), up to its first command.
pub fn parse(script: &str, directive: &str) -> Result<JobRequest, DirectiveErrors> {
    let tag = format!("#{directive}");
    let ours = |line: &str| {
        line.strip_prefix(&tag)
            // `#EDDYX` is another word, not our directive.
            .filter(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace))
            .is_some()
    };
    let mut p = Parser::default();
    let mut count = 0usize;
    let mut lines = script.lines().enumerate();
    for (i, line) in lines.by_ref() {
        // As Slurm reads a script: empty lines are skipped, the first line that does not
        // start with `#` ends the directives.
        if line.is_empty() {
            continue;
        }
        if !line.starts_with('#') {
            // A directive below the first command is neither charged by Slurm nor obeyed.
            let first = i + 1;
            if let Some((j, _)) = lines.find(|(_, l)| ours(l)) {
                p.errors.push((
                    j + 1,
                    format!(
                        "#{directive} line below the script's first command (line {first}), \
                         where Slurm no longer reads directives: move it above"
                    ),
                ));
            }
            break;
        }
        if !ours(line) {
            continue;
        }
        count += 1;
        if count > MAX_LINES {
            p.stopped = Some((
                i + 1,
                format!("more than {MAX_LINES} #{directive} lines: this script has too many"),
            ));
            break;
        }
        if line.len() > MAX_LINE_BYTES {
            p.errors.push((
                i + 1,
                format!("a directive line is at most {MAX_LINE_BYTES} bytes"),
            ));
            continue;
        }
        p.line(i + 1, line[tag.len()..].trim_end());
    }
    p.finish()
}

#[derive(Default)]
struct Parser {
    req: JobRequest,
    errors: Vec<(usize, String)>,
    /// Line where each option was first given.
    seen: Vec<(&'static str, usize)>,
    /// Staged paths with their lines, checked against the links at the end.
    staged: Vec<(usize, String)>,
    /// The line of each link (in `req.links` order), for the overlap check at the end.
    link_lines: Vec<usize>,
    /// Link lines and staging lines seen, for their bounds.
    links_seen: usize,
    staged_seen: usize,
    /// Why parsing stopped early (too many lines): reported whatever else is.
    stopped: Option<(usize, String)>,
}

/// The error of the first line past a bound; the lines after it are dropped unsaid (the
/// script is refused anyway, with one problem rather than thousands). Only called past it.
fn over_bound(seen: usize, bound: usize, what: &str) -> Result<(), String> {
    if seen == bound + 1 {
        Err(format!("at most {bound} {what}"))
    } else {
        Err(String::new())
    }
}

impl Parser {
    fn line(&mut self, n: usize, rest: &str) {
        let words: Vec<&str> = rest.split_whitespace().collect();
        let Some((&first, args)) = words.split_first() else {
            self.errors.push((
                n,
                format!("empty directive (options: {OPTIONS}; verbs: {VERBS})"),
            ));
            return;
        };
        let result = match first {
            "link" => self.link(n, args),
            "stage_in" => self.stage_in(n, args),
            "prefetch" => self.prefetch(n, args),
            "stage_out" => self.stage_out(n, args),
            _ if first.contains('=') => self.options(n, &words),
            other => Err(format!(
                "unknown directive {other:?} (options: {OPTIONS}; verbs: {VERBS})"
            )),
        };
        match result {
            Err(msg) if !msg.is_empty() => self.errors.push((n, msg)),
            _ => {}
        }
    }

    fn options(&mut self, n: usize, words: &[&str]) -> Result<(), String> {
        words.iter().try_for_each(|w| self.option(n, w))?;
        let has = |key: &str| words.iter().any(|w| w.starts_with(&format!("{key}=")));
        if has("capacity") && !has("pool") {
            return Err(format!(
                "capacity= needs pool= on the same line (Slurm charges the capacity to that \
                 pool), e.g. `#EDDY capacity=100G pool={}`",
                NODE_LOCAL_POOL
            ));
        }
        Ok(())
    }

    fn option(&mut self, n: usize, word: &str) -> Result<(), String> {
        let (key, value) = word
            .split_once('=')
            .ok_or_else(|| format!("{word:?} is not key=value ({OPTIONS})"))?;
        if value.is_empty() {
            return Err(format!("{key}= has no value"));
        }
        let key: &'static str = match key {
            "capacity" => "capacity",
            "pool" => "pool",
            "mode" => "mode",
            "chunk_size" => "chunk_size",
            "nodes" => "nodes",
            other => return Err(format!("unknown option {other:?} (options: {OPTIONS})")),
        };
        if let Some((_, first)) = self.seen.iter().find(|(k, _)| *k == key) {
            return Err(format!("{key} is already given on line {first}"));
        }
        self.seen.push((key, n));
        match key {
            "capacity" => self.req.capacity = Some(slurm_size(value)?),
            "pool" => self.req.pool = Some(value.to_string()),
            "chunk_size" => {
                self.req.chunk_size =
                    Some(parse_bytes(value).map_err(|e| format!("chunk_size: {e}"))?)
            }
            "mode" => {
                self.req.mode = Some(match value {
                    "node-local" | "node_local" => Mode::NodeLocal,
                    "pool" => Mode::Pool,
                    other => return Err(format!("mode {other:?} is neither node-local nor pool")),
                })
            }
            _ => {
                let count: u32 = value
                    .parse()
                    .ok()
                    .filter(|&c| c > 0)
                    .ok_or_else(|| format!("nodes={value} is not a positive number"))?;
                self.req.nodes = Some(count);
            }
        }
        Ok(())
    }

    fn link(&mut self, n: usize, args: &[&str]) -> Result<(), String> {
        let [spec] = args else {
            return Err("link takes one PREFIX=DIR, e.g. `link /data=/pfs/run7`".into());
        };
        self.links_seen += 1;
        if self.links_seen > MAX_LINKS {
            return over_bound(self.links_seen, MAX_LINKS, "links");
        }
        let link = Link::parse(spec).map_err(|e| e.to_string())?;
        self.req.links.push(link);
        self.link_lines.push(n);
        Ok(())
    }

    fn stage_in(&mut self, n: usize, args: &[&str]) -> Result<(), String> {
        let (path, pin) = match args {
            [path] => (*path, false),
            [path, "pin"] => (*path, true),
            _ => return Err("stage_in takes a namespace path and optionally `pin`".into()),
        };
        let path = namespace_path(path)?;
        self.count_staged()?;
        self.staged.push((n, path.clone()));
        self.req.stage_in.push(StageIn { path, pin });
        Ok(())
    }

    fn prefetch(&mut self, n: usize, args: &[&str]) -> Result<(), String> {
        let [path] = args else {
            return Err("prefetch takes one namespace path (it pins nothing)".into());
        };
        let path = namespace_path(path)?;
        self.count_staged()?;
        self.staged.push((n, path.clone()));
        self.req.prefetch.push(path);
        Ok(())
    }

    fn stage_out(&mut self, n: usize, args: &[&str]) -> Result<(), String> {
        let [path] = args else {
            return Err("stage_out takes one namespace path".into());
        };
        let path = namespace_path(path)?;
        self.count_staged()?;
        self.staged.push((n, path.clone()));
        self.req.stage_out.push(path);
        Ok(())
    }

    fn count_staged(&mut self) -> Result<(), String> {
        self.staged_seen += 1;
        if self.staged_seen > MAX_STAGED {
            return over_bound(
                self.staged_seen,
                MAX_STAGED,
                "stage_in, prefetch and stage_out lines together",
            );
        }
        Ok(())
    }

    /// Checks what only the whole script can tell: no two links overlap (on the links sorted
    /// by prefix), and staged paths lie under a link (by their ancestors).
    fn finish(mut self) -> Result<JobRequest, DirectiveErrors> {
        // Sorted by `prefix/`, a prefix sorts before the prefixes it covers, and everything
        // between a prefix and one it covers is covered too: an overlap shows between
        // neighbours.
        let key = |p: &str| {
            if p == "/" {
                String::from("/")
            } else {
                format!("{p}/")
            }
        };
        let mut sorted: Vec<(String, usize, usize)> = self
            .req
            .links
            .iter()
            .enumerate()
            .map(|(i, l)| (key(&l.prefix), self.link_lines[i], i))
            .collect();
        sorted.sort();
        for pair in sorted.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let (la, lb) = (&self.req.links[a.2], &self.req.links[b.2]);
            if la.covers(&lb.prefix) {
                // Reported on the later of the two lines.
                let (line, this, other) = if a.1 > b.1 {
                    (a.1, la, lb)
                } else {
                    (b.1, lb, la)
                };
                self.errors.push((
                    line,
                    format!(
                        "link {} overlaps link {} (one backend per prefix)",
                        this.prefix, other.prefix
                    ),
                ));
            }
        }
        // A path lies under a link when the path or one of its ancestors is a prefix.
        let prefixes: std::collections::HashSet<&str> =
            self.req.links.iter().map(|l| l.prefix.as_str()).collect();
        for (n, path) in &self.staged {
            let mut covered = prefixes.contains("/") || prefixes.contains(path.as_str());
            let mut cur = path.as_str();
            while let (false, Some(i)) = (covered, cur.rfind('/')) {
                cur = &cur[..i];
                covered = prefixes.contains(cur);
            }
            if !covered {
                self.errors.push((
                    *n,
                    format!(
                        "{path} lies under no `link` prefix: staging moves data between a \
                         linked prefix and its backend directory"
                    ),
                ));
            }
        }
        if self.errors.is_empty() && self.stopped.is_none() {
            return Ok(self.req);
        }
        self.errors.sort_by_key(|(line, _)| *line);
        let more = self.errors.len().saturating_sub(MAX_REPORTED);
        if more > 0 {
            self.errors.truncate(MAX_REPORTED);
            let last = self.errors.last().map_or(0, |(l, _)| *l);
            self.errors
                .push((last, format!("and {more} more problems below")));
        }
        self.errors.extend(self.stopped);
        Err(DirectiveErrors(self.errors))
    }
}

/// The pool name of node-local mode (the I/O-node pool is named by the site).
pub const NODE_LOCAL_POOL: &str = "node-local";

/// A capacity as Slurm reads it: a whole number with an optional K, M, G, T or P suffix
/// (powers of 1024; `iB` or `B` may follow). Fractions are refused: Slurm would charge
/// their whole part only.
fn slurm_size(value: &str) -> Result<u64, String> {
    let digits = value.len() - value.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let (num, unit) = value.split_at(digits);
    let shift = match unit
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        "P" => 50,
        _ => {
            return Err(format!(
                "capacity={value}: a whole number with an optional K, M, G, T or P suffix, \
                 e.g. capacity=200G (Slurm reads no fractions)"
            ))
        }
    };
    num.parse::<u64>()
        .ok()
        .filter(|&n| n > 0)
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("capacity={value} is not a positive size"))
}

/// An absolute, normalised namespace path (no `.`, `..`, `//`, trailing `/`).
fn namespace_path(p: &str) -> Result<String, String> {
    let trimmed = if p.len() > 1 {
        p.trim_end_matches('/')
    } else {
        p
    };
    let bad = !trimmed.starts_with('/')
        || trimmed.contains("//")
        || trimmed.split('/').any(|c| c == "." || c == "..");
    if bad {
        return Err(format!(
            "{p:?} is not an absolute namespace path such as /data/inputs"
        ));
    }
    Ok(trimmed.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "#!/bin/bash
#SBATCH -N 4
#EDDY capacity=200GiB pool=node-local mode=node-local
#EDDY link /data=/pfs/project/run7
#EDDY stage_in /data/inputs pin
#EDDY stage_out /data/results/
#EDDYX not ours
srun ./simulate
";

    #[test]
    fn the_user_guide_example_parses() {
        let r = parse(SCRIPT, "EDDY").unwrap();
        assert_eq!(r.capacity, Some(200 << 30));
        assert_eq!(r.pool.as_deref(), Some("node-local"));
        assert_eq!(r.mode, Some(Mode::NodeLocal));
        assert_eq!(
            r.links,
            vec![Link::parse("/data=/pfs/project/run7").unwrap()]
        );
        assert_eq!(
            r.stage_in,
            vec![StageIn {
                path: "/data/inputs".into(),
                pin: true
            }]
        );
        assert_eq!(r.stage_out, vec!["/data/results".to_string()]);
        assert_eq!(
            parse("#!/bin/sh\necho hi\n", "EDDY").unwrap(),
            JobRequest::default()
        );
    }

    #[test]
    fn prefetch_takes_one_linked_path_and_counts_as_staged() {
        let script = "#EDDY link /data=/pfs/run7\n\
                      #EDDY stage_in /data/inputs\n\
                      #EDDY prefetch /data/restart/\n\
                      #EDDY prefetch /data\n";
        let r = parse(script, "EDDY").unwrap();
        assert_eq!(
            r.prefetch,
            vec!["/data/restart".to_string(), "/data".into()]
        );
        assert_eq!(r.stage_in.len(), 1);
        let bad = "#EDDY link /data=/pfs\n\
                   #EDDY prefetch /elsewhere\n\
                   #EDDY prefetch /data/a pin\n\
                   #EDDY prefetch\n\
                   #EDDY prefetch data/rel\n\
                   #EDDY prefetch /data/../etc\n";
        let e = parse(bad, "EDDY").unwrap_err();
        let lines: Vec<usize> = e.0.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, vec![2, 3, 4, 5, 6], "{e}");
        let text = e.to_string();
        for needle in [
            "#EDDY line 2: /elsewhere lies under no `link` prefix",
            "#EDDY line 3: prefetch takes one namespace path",
            "#EDDY line 4: prefetch takes one namespace path",
            "#EDDY line 5: \"data/rel\" is not an absolute namespace path",
            "#EDDY line 6: \"/data/../etc\" is not an absolute namespace path",
        ] {
            assert!(text.contains(needle), "{needle:?} not in {text}");
        }
        // Prefetched trees count with the staged ones against MAX_STAGED.
        let many: String = std::iter::once("#EDDY link /d=/b\n".to_string())
            .chain((0..MAX_STAGED).map(|i| format!("#EDDY stage_in /d/{i}\n")))
            .chain(std::iter::once("#EDDY prefetch /d/x\n".to_string()))
            .collect();
        let e = parse(&many, "EDDY").unwrap_err();
        assert_eq!(e.0.len(), 1, "{e}");
        assert!(
            e.to_string().contains("at most 256 stage_in, prefetch"),
            "{e}"
        );
        // A record written before the field existed reads as no prefetch.
        let old: JobRequest =
            toml::from_str("links = []\nstage_in = []\nstage_out = []\n").unwrap();
        assert!(old.prefetch.is_empty());
    }

    #[test]
    fn every_problem_is_named_with_its_line() {
        let script = "#EDDY capcity=1G\n\
                      #EDDY mode=fast nodes=0\n\
                      #EDDY capacity=1G pool=p capacity=2G\n\
                      #EDDY link data=/pfs\n\
                      #EDDY stage_in /elsewhere\n\
                      #EDDY frobnicate\n\
                      #EDDY\n";
        let e = parse(script, "EDDY").unwrap_err();
        let lines: Vec<usize> = e.0.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, vec![1, 2, 3, 4, 5, 6, 7], "{e}");
        let text = e.to_string();
        for needle in [
            "#EDDY line 1: unknown option \"capcity\"",
            "mode \"fast\" is neither node-local nor pool",
            "capacity is already given on line 3",
            "link prefix \"data\" must be an absolute",
            "/elsewhere lies under no `link` prefix",
            "unknown directive \"frobnicate\"",
            "#EDDY line 7: empty directive",
        ] {
            assert!(text.contains(needle), "{needle:?} not in {text}");
        }
    }

    #[test]
    fn links_may_not_overlap_and_sizes_take_units() {
        let e = parse("#EDDY link /a=/p\n#EDDY link /a/b=/q\n", "EDDY").unwrap_err();
        assert!(e.to_string().contains("overlaps"), "{e}");
        let r = parse(
            "#EDDY chunk_size=512K capacity=2T pool=io mode=pool nodes=3\n",
            "EDDY",
        )
        .unwrap();
        assert_eq!(r.chunk_size, Some(512 << 10));
        assert_eq!(r.capacity, Some(2 << 40));
        assert_eq!((r.mode, r.nodes), (Some(Mode::Pool), Some(3)));
        for (line, needle) in [
            ("#EDDY capacity=1.5T pool=io\n", "Slurm reads no fractions"),
            ("#EDDY capacity=10G\n", "needs pool= on the same line"),
            ("#EDDY capacity=0 pool=io\n", "not a positive size"),
        ] {
            let e = parse(line, "EDDY").unwrap_err().to_string();
            assert!(e.contains(needle), "{line}: {e}");
        }
        // Another directive word (burst_buffer.conf Directive=) is honoured.
        assert_eq!(
            parse("#BB capacity=1G pool=x\n", "BB").unwrap().capacity,
            Some(1 << 30)
        );
    }

    #[test]
    fn directives_end_at_the_first_command_as_slurm_reads_them() {
        let script = "#!/bin/bash\n\n#SBATCH -N 1\n#EDDY capacity=1G pool=io\necho hi\n\
                      #EDDY capacity=100T pool=io\n#EDDY link /a=/b\n";
        let e = parse(script, "EDDY").unwrap_err();
        assert_eq!(e.0.len(), 1, "{e}");
        assert_eq!(e.0[0].0, 6, "{e}");
        assert!(
            e.to_string()
                .contains("below the script's first command (line 5)"),
            "{e}"
        );
        // A line starting with a blank is a command too, for Slurm.
        let e = parse("#EDDY capacity=1G pool=io\n  #EDDY nodes=2\n", "EDDY");
        assert!(e.is_ok(), "{e:?}");
        let e = parse("  x\n#EDDY nodes=2\n", "EDDY").unwrap_err();
        assert!(e.to_string().contains("first command (line 1)"), "{e}");
    }

    #[test]
    fn scripts_are_bounded_in_lines_links_staged_trees_and_line_length() {
        // 200,000 directive lines: refused at the bound, with one problem, not 200,000.
        let huge: String = (0..200_000)
            .map(|i| format!("#EDDY link /p{i}=/b\n"))
            .collect();
        let e = parse(&huge, "EDDY").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(&format!("more than {MAX_LINES} #EDDY lines")),
            "{text:.300}"
        );
        assert!(e.0.len() <= MAX_REPORTED + 2, "{} problems", e.0.len());
        // The same with a problem on every line: the bound is still said.
        let dup: String = (0..200_000).map(|_| "#EDDY nodes=1\n").collect();
        let e = parse(&dup, "EDDY").unwrap_err();
        assert!(e.to_string().contains("more than 1000"), "{e}");
        assert!(e.to_string().contains("and 979 more problems below"), "{e}");
        let links: String = (0..=MAX_LINKS)
            .map(|i| format!("#EDDY link /p{i}=/b\n"))
            .collect();
        let e = parse(&links, "EDDY").unwrap_err();
        assert_eq!(e.0.len(), 1, "{e}");
        assert!(
            e.to_string()
                .contains(&format!("at most {MAX_LINKS} links")),
            "{e}"
        );
        let staged: String = std::iter::once("#EDDY link /d=/b\n".to_string())
            .chain((0..=MAX_STAGED).map(|i| format!("#EDDY stage_out /d/{i}\n")))
            .collect();
        let e = parse(&staged, "EDDY").unwrap_err();
        assert!(
            e.to_string()
                .contains("stage_in, prefetch and stage_out lines"),
            "{e}"
        );
        let long = format!("#EDDY link /d=/{}\n", "x".repeat(MAX_LINE_BYTES));
        let e = parse(&long, "EDDY").unwrap_err();
        assert!(e.to_string().contains("at most 4096 bytes"), "{e}");
    }

    #[test]
    fn overlaps_are_found_between_sorted_neighbours() {
        // `/a-x` sorts between `/a` and `/a/b` as plain strings; the check still sees them.
        let script = "#EDDY link /a=/p\n#EDDY link /a-x=/q\n#EDDY link /a/b=/r\n\
                      #EDDY stage_in /a-x/in\n#EDDY stage_out /a/c\n#EDDY stage_out /b\n";
        let e = parse(script, "EDDY").unwrap_err();
        let lines: Vec<usize> = e.0.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, vec![3, 6], "{e}");
        assert!(e.to_string().contains("link /a/b overlaps link /a"), "{e}");
        let r = parse("#EDDY link /=/root\n#EDDY stage_in /x/y\n", "EDDY").unwrap();
        assert_eq!(r.stage_in.len(), 1);
        let e = parse("#EDDY link /=/p\n#EDDY link /z=/q\n", "EDDY").unwrap_err();
        assert!(e.to_string().contains("overlaps"), "{e}");
    }
}
