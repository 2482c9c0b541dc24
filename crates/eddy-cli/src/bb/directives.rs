//! The `#EDDY` lines of a batch script: what a job asks of its burst buffer.
//!
//! One directive per line; a line is `#EDDY` followed by words. Options are `key=value`
//! words (several may share a line); the verbs `link`, `stage_in` and `stage_out` take one
//! line each. Every problem is reported with its line number, all of them at once, so that
//! `sbatch` can refuse the script with one message the user can act on.
//!
//! ```text
//! #EDDY capacity=200GiB mode=node-local chunk_size=1MiB
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
const OPTIONS: &str = "capacity, mode, chunk_size, nodes";
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
            _ if first.contains('=') => words.iter().try_for_each(|w| self.option(n, w)),
            other => Err(format!(
                "unknown directive {other:?} (options: {OPTIONS}; verbs: {VERBS})"
            )),
        };
        if let Err(msg) = result {
            self.errors.push((n, msg));
        }
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
            "capacity" => {
                self.req.capacity = Some(parse_bytes(value).map_err(|e| format!("capacity: {e}"))?)
            }
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
#EDDY capacity=200GiB mode=node-local
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
                      #EDDY capacity=1G capacity=2G\n\
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
            "#EDDY chunk_size=512K capacity=1.5T mode=pool nodes=3\n",
            "EDDY",
        )
        .unwrap();
        assert_eq!(r.chunk_size, Some(512 << 10));
        assert_eq!(r.capacity, Some(3 << 39));
        assert_eq!((r.mode, r.nodes), (Some(Mode::Pool), Some(3)));
        // Another directive word (burst_buffer.conf Directive=) is honoured.
        assert_eq!(
            parse("#BB capacity=1G\n", "BB").unwrap().capacity,
            Some(1 << 30)
        );
    }
}
