//! The `#EDDY` lines of a batch script: what a job asks of its burst buffer.
//!
//! One directive per line; a line is `#EDDY` followed by words. Options are `key=value`
//! words (several may share a line); the verbs `link`, `stage_in` and `stage_out` take one
//! line each. Every problem is reported with its line number, all of them at once, so that
//! `sbatch` can refuse the script with one message the user can act on.
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
const VERBS: &str = "link, stage_in, stage_out";

/// Parses the `#<directive>` lines of `script` (the directive word is the site's
/// `Directive=` of burst_buffer.conf, `EDDY` by default).
pub fn parse(script: &str, directive: &str) -> Result<JobRequest, DirectiveErrors> {
    let tag = format!("#{directive}");
    let mut p = Parser::default();
    for (i, line) in script.lines().enumerate() {
        let Some(rest) = line.trim_end().strip_prefix(&tag) else {
            continue;
        };
        // `#EDDYX` is another word, not our directive.
        if !(rest.is_empty() || rest.starts_with(char::is_whitespace)) {
            continue;
        }
        p.line(i + 1, rest);
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
            "link" => self.link(args),
            "stage_in" => self.stage_in(n, args),
            "stage_out" => self.stage_out(n, args),
            _ if first.contains('=') => self.options(n, &words),
            other => Err(format!(
                "unknown directive {other:?} (options: {OPTIONS}; verbs: {VERBS})"
            )),
        };
        if let Err(msg) = result {
            self.errors.push((n, msg));
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

    fn link(&mut self, args: &[&str]) -> Result<(), String> {
        let [spec] = args else {
            return Err("link takes one PREFIX=DIR, e.g. `link /data=/pfs/run7`".into());
        };
        let link = Link::parse(spec).map_err(|e| e.to_string())?;
        let overlap = self
            .req
            .links
            .iter()
            .find(|l| l.covers(&link.prefix) || link.covers(&l.prefix));
        if let Some(other) = overlap {
            return Err(format!(
                "link {} overlaps link {} (one backend per prefix)",
                link.prefix, other.prefix
            ));
        }
        self.req.links.push(link);
        Ok(())
    }

    fn stage_in(&mut self, n: usize, args: &[&str]) -> Result<(), String> {
        let (path, pin) = match args {
            [path] => (*path, false),
            [path, "pin"] => (*path, true),
            _ => return Err("stage_in takes a namespace path and optionally `pin`".into()),
        };
        let path = namespace_path(path)?;
        self.staged.push((n, path.clone()));
        self.req.stage_in.push(StageIn { path, pin });
        Ok(())
    }

    fn stage_out(&mut self, n: usize, args: &[&str]) -> Result<(), String> {
        let [path] = args else {
            return Err("stage_out takes one namespace path".into());
        };
        let path = namespace_path(path)?;
        self.staged.push((n, path.clone()));
        self.req.stage_out.push(path);
        Ok(())
    }

    /// Checks what only the whole script can tell: staged paths must lie under a link.
    fn finish(mut self) -> Result<JobRequest, DirectiveErrors> {
        for (n, path) in &self.staged {
            if !self.req.links.iter().any(|l| l.covers(path)) {
                self.errors.push((
                    *n,
                    format!(
                        "{path} lies under no `link` prefix: staging moves data between a \
                         linked prefix and its backend directory"
                    ),
                ));
            }
        }
        if self.errors.is_empty() {
            Ok(self.req)
        } else {
            self.errors.sort_by_key(|(line, _)| *line);
            Err(DirectiveErrors(self.errors))
        }
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
}
