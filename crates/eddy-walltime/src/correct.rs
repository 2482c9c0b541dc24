//! Corrections of an underestimated walltime (the COARE paper, §4.4): when a job is still
//! running 60 s before its predicted end, the scheduler extends the prediction; this module
//! computes where the extensions end for a job of known runtime.

use serde::{Deserialize, Serialize};

/// A job still running this many seconds before its predicted end gets a correction.
pub const MARGIN: u64 = 60;
/// Simple correction: one hour per step.
pub const SIMPLE_STEP: u64 = 3600;
/// Simple correction: no more steps once the job has run this long (7 days, Algorithm 2).
pub const SIMPLE_HORIZON: u64 = 7 * 86400;
/// Power correction: the k-th correction (k = 1, 2, ...) adds 15 × 2^(k−1) minutes, the
/// paper's 15 × 2^(i−2) with i = k + 1 = 2, 3, ...
pub const POWER_BASE: u64 = 15 * 60;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Correction {
    None,
    Simple,
    Power,
}

impl Correction {
    pub const ALL: [Correction; 3] = [Correction::None, Correction::Simple, Correction::Power];

    pub fn name(self) -> &'static str {
        match self {
            Correction::None => "none",
            Correction::Simple => "simple",
            Correction::Power => "power",
        }
    }
}

/// Where a prediction ends after its corrections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrected {
    /// The walltime the scheduler holds when the job ends.
    pub walltime: u64,
    /// How many corrections it took.
    pub corrections: u32,
}

/// The corrections a job of `runtime` seconds gets from an initial `prediction`, never past
/// `cap` (the user's request). A correction happens while the job is still running
/// `MARGIN` seconds before the current walltime (runtime + 60 > walltime).
pub fn correct(method: Correction, prediction: u64, runtime: u64, cap: u64) -> Corrected {
    let mut walltime = prediction.min(cap);
    let mut corrections = 0u32;
    let still_running = |w: u64| runtime + MARGIN > w;
    loop {
        if method == Correction::None || !still_running(walltime) || walltime >= cap {
            break;
        }
        let step = match method {
            Correction::Simple => {
                // Algorithm 2: only while the job has run at most 7 days.
                if walltime.saturating_sub(MARGIN) > SIMPLE_HORIZON {
                    break;
                }
                SIMPLE_STEP
            }
            Correction::Power => POWER_BASE.saturating_mul(1u64 << corrections.min(40)),
            Correction::None => break,
        };
        walltime = walltime.saturating_add(step).min(cap);
        corrections += 1;
    }
    Corrected {
        walltime,
        corrections,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const H: u64 = 3600;
    const M: u64 = 60;

    #[test]
    fn simple_adds_an_hour_until_the_job_fits() {
        // The paper's Fig. 5: an 8-h job from a 2-h and from a 6-h head start.
        assert_eq!(
            correct(Correction::Simple, 2 * H, 8 * H, 100 * H),
            Corrected {
                walltime: 9 * H,
                corrections: 7
            }
        );
        assert_eq!(
            correct(Correction::Simple, 6 * H, 8 * H, 100 * H),
            Corrected {
                walltime: 9 * H,
                corrections: 3
            }
        );
        // Ends 30 s before its prediction: still running at the 60-s mark, one correction.
        assert_eq!(
            correct(Correction::Simple, H, H - 30, 100 * H).corrections,
            1
        );
        // Ends 2 min before: none.
        assert_eq!(
            correct(Correction::Simple, H, H - 2 * M, 100 * H),
            Corrected {
                walltime: H,
                corrections: 0
            }
        );
    }

    #[test]
    fn power_doubles_from_fifteen_minutes() {
        // 1 h + 15 + 30 + 60 + 120 min = 4 h 45 min ≥ 4 h.
        assert_eq!(
            correct(Correction::Power, H, 4 * H, 100 * H),
            Corrected {
                walltime: H + 225 * M,
                corrections: 4
            }
        );
        assert_eq!(
            correct(Correction::Power, 2 * H, 8 * H, 100 * H),
            Corrected {
                walltime: 2 * H + 465 * M,
                corrections: 5
            }
        );
    }

    #[test]
    fn never_past_the_request_or_seven_days() {
        assert_eq!(
            correct(Correction::Simple, H, 10 * H, 3 * H),
            Corrected {
                walltime: 3 * H,
                corrections: 2
            }
        );
        assert_eq!(
            correct(Correction::Power, H, 10 * H, 90 * M),
            Corrected {
                walltime: 90 * M,
                corrections: 2
            }
        );
        assert_eq!(
            correct(Correction::None, 5 * H, 10 * H, 3 * H),
            Corrected {
                walltime: 3 * H,
                corrections: 0
            }
        );
        // A 9-day job from a 1-day prediction: simple stops once past 7 days.
        let c = correct(Correction::Simple, 24 * H, 9 * 24 * H, 30 * 24 * H);
        assert_eq!(c.walltime, 7 * 24 * H + H);
        assert_eq!(c.corrections, 6 * 24 + 1);
    }
}
