//! Coordinator ↔ worker protocol: newline-delimited JSON over one TCP connection per worker.
//!
//! worker → coordinator: `Hello` once, then per phase any number of `Progress`, in a creating
//! phase possibly one `Stonewalled` (answered by `Continue`), and one `Done` or `Failed`.
//! coordinator → worker: `Setup` once, then `Run` per phase, then `Exit`.
//! The coordinator sends the next `Run` only after every worker answered the previous one:
//! that is the barrier between phases.

use crate::hist::Histogram;
use crate::plan::{Phase, Plan, Sizes};
use anyhow::Context;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::io::{BufRead, Write};

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum ToCoord {
    Hello {
        rank: u32,
        token: String,
    },
    Progress {
        ops: u64,
    },
    /// The stonewall hit after `items` creations; waiting for `Continue`.
    Stonewalled {
        items: u64,
    },
    Done(PhaseStats),
    Failed {
        error: String,
    },
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum ToWorker {
    Setup {
        plan: Box<Plan>,
    },
    /// Run a phase with these (effective) sizes.
    Run {
        phase: Phase,
        sizes: Sizes,
    },
    /// After a stonewall: create up to `to` items in all.
    Continue {
        to: u64,
    },
    Exit,
}

/// What one rank measured in one phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PhaseStats {
    pub ops: u64,
    pub bytes: u64,
    /// Files matched (find phase only).
    pub matches: u64,
    /// Items created by this rank (creating phases, ranks that create only).
    pub items: Option<u64>,
    pub latency: Histogram,
}

impl PhaseStats {
    pub fn merge(&mut self, o: &PhaseStats) {
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.matches += o.matches;
        self.items = match (self.items, o.items) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.latency.merge(&o.latency);
    }
}

pub fn send<T: Serialize>(w: &mut impl Write, msg: &T) -> anyhow::Result<()> {
    let mut line = serde_json::to_vec(msg).context("encoding a message")?;
    line.push(b'\n');
    w.write_all(&line)
        .context("sending to the coordinator connection")?;
    w.flush().context("sending to the coordinator connection")
}

/// Reads one message; Ok(None) at end of stream.
pub fn recv<T: DeserializeOwned>(r: &mut impl BufRead) -> anyhow::Result<Option<T>> {
    let mut line = String::new();
    if r.read_line(&mut line)
        .context("reading from the coordinator connection")?
        == 0
    {
        return Ok(None);
    }
    let msg = serde_json::from_str(&line).with_context(|| format!("malformed message {line:?}"))?;
    Ok(Some(msg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufReader;

    #[test]
    fn messages_round_trip_over_a_byte_stream() {
        let mut stats = PhaseStats {
            ops: 3,
            bytes: 9,
            matches: 1,
            items: Some(3),
            ..Default::default()
        };
        stats.latency.record(std::time::Duration::from_micros(5));
        let mut wire = Vec::new();
        send(&mut wire, &ToCoord::Stonewalled { items: 7 }).unwrap();
        send(&mut wire, &ToCoord::Done(stats.clone())).unwrap();
        let mut r = BufReader::new(&wire[..]);
        assert!(matches!(
            recv::<ToCoord>(&mut r).unwrap(),
            Some(ToCoord::Stonewalled { items: 7 })
        ));
        match recv::<ToCoord>(&mut r).unwrap() {
            Some(ToCoord::Done(got)) => {
                assert_eq!(
                    (got.ops, got.bytes, got.matches, got.items),
                    (3, 9, 1, Some(3))
                );
                assert_eq!(got.latency, stats.latency);
            }
            other => panic!("{other:?}"),
        }
        assert!(recv::<ToCoord>(&mut r).unwrap().is_none());
        assert!(recv::<ToCoord>(&mut BufReader::new(&b"{bad\n"[..])).is_err());
    }
}
