//! Replay of a trace: every job, in submit order, is predicted by every predictor from the
//! jobs that finished before it was submitted (nothing from the future), then corrected by
//! each correction; the evaluation is the COARE paper's accuracy view: the share of jobs
//! whose final walltime is within 20 % of the runtime, the mean absolute error, the share
//! of underestimates and the mean number of corrections.

use crate::correct::{correct, Correction};
use crate::predict::{cap, easy, Params, Predictor, Regression, Users};
use crate::Job;
use anyhow::Result;
use serde::Serialize;
use std::collections::HashMap;

/// One predictor with one correction over the whole trace.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub predictor: Predictor,
    pub correction: Correction,
    /// Share of jobs with |walltime − runtime| ≤ 0.2 × runtime.
    pub within_20: f64,
    /// Mean |walltime − runtime| in seconds.
    pub mae: f64,
    /// Share of jobs whose final walltime is below their runtime.
    pub underestimates: f64,
    pub mean_corrections: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    pub jobs: usize,
    /// Jobs EASY++ predicted (the others fell back to the request).
    pub easy_predicted: usize,
    /// Jobs the regression predicted (the others fell back to the request).
    pub adaboost_predicted: usize,
    pub rows: Vec<Row>,
}

/// The initial predictions of every job (in the order of `jobs`), per predictor, with
/// whether EASY++ and the regression had enough history (else they gave the request).
pub fn predictions(jobs: &[Job], params: &Params) -> Result<Vec<([u64; 3], bool, bool)>> {
    let mut by_submit: Vec<usize> = (0..jobs.len()).collect();
    by_submit.sort_by_key(|&i| (jobs[i].submit, i));
    let mut by_end: Vec<usize> = (0..jobs.len()).collect();
    by_end.sort_by_key(|&i| (jobs[i].end, i));
    let mut out = vec![([0u64; 3], false, false); jobs.len()];
    let mut runtimes: HashMap<&str, Vec<u64>> = HashMap::new();
    let mut finished: Vec<&Job> = Vec::new();
    let mut users = Users::default();
    let mut model: Option<Regression> = None;
    let mut trained_at = 0usize;
    let mut next = 0usize;
    for &i in &by_submit {
        let job = &jobs[i];
        while next < by_end.len() && jobs[by_end[next]].end < job.submit {
            let done = &jobs[by_end[next]];
            runtimes
                .entry(done.user.as_str())
                .or_default()
                .push(done.runtime);
            finished.push(done);
            next += 1;
        }
        if finished.len() >= params.min_train
            && (model.is_none() || finished.len() - trained_at >= params.retrain_after.max(1))
        {
            let skip = finished.len().saturating_sub(params.max_train);
            model = Regression::fit(&finished[skip..], &mut users, params)?;
            trained_at = finished.len();
        }
        let request = cap(job, params);
        let e = runtimes
            .get(job.user.as_str())
            .and_then(|r| easy(r, request));
        let a = match &model {
            Some(m) => Some(m.predict(job, &mut users, params)?),
            None => None,
        };
        out[i] = (
            [request, e.unwrap_or(request), a.unwrap_or(request)],
            e.is_some(),
            a.is_some(),
        );
    }
    Ok(out)
}

/// Evaluate every predictor with every correction over `jobs`.
pub fn replay(jobs: &[Job], params: &Params) -> Result<Evaluation> {
    let preds = predictions(jobs, params)?;
    let n = jobs.len().max(1) as f64;
    let mut rows = Vec::new();
    for (k, predictor) in Predictor::ALL.into_iter().enumerate() {
        for correction in Correction::ALL {
            let (mut within, mut abs, mut under, mut corrections) = (0usize, 0.0, 0usize, 0u64);
            for (job, (p, _, _)) in jobs.iter().zip(&preds) {
                let c = correct(correction, p[k], job.runtime, cap(job, params));
                let (w, r) = (c.walltime as f64, job.runtime as f64);
                within += usize::from((w - r).abs() <= 0.2 * r);
                abs += (w - r).abs();
                under += usize::from(c.walltime < job.runtime);
                corrections += u64::from(c.corrections);
            }
            rows.push(Row {
                predictor,
                correction,
                within_20: within as f64 / n,
                mae: abs / n,
                underestimates: under as f64 / n,
                mean_corrections: corrections as f64 / n,
            });
        }
    }
    Ok(Evaluation {
        jobs: jobs.len(),
        easy_predicted: preds.iter().filter(|p| p.1).count(),
        adaboost_predicted: preds.iter().filter(|p| p.2).count(),
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::tests::job;

    fn row(e: &Evaluation, p: Predictor, c: Correction) -> Row {
        e.rows
            .iter()
            .find(|r| r.predictor == p && r.correction == c)
            .unwrap()
            .clone()
    }

    #[test]
    fn a_small_trace_computed_by_hand() {
        // User a, request 10 000 s: runtimes 1000, 3000, then two more jobs submitted after
        // both finished. EASY++ predicts the request for the first two jobs, then
        // (1000 + 3000) / 2 = 2000 for job 3 (runtime 2000: exact) and, job 3 having
        // finished, (3000 + 2000) / 2 = 2500 for job 4 (runtime 5000: under by 2500).
        let jobs = vec![
            job(1, "a", 10_000, 0, 1000),
            job(2, "a", 10_000, 0, 3000),
            job(3, "a", 10_000, 5000, 2000),
            job(4, "a", 10_000, 8000, 5000),
        ];
        let params = Params {
            min_train: 100,
            ..Params::default()
        };
        let e = replay(&jobs, &params).unwrap();
        assert_eq!((e.jobs, e.easy_predicted, e.adaboost_predicted), (4, 2, 0));

        let r = row(&e, Predictor::Request, Correction::None);
        assert_eq!(r.within_20, 0.0);
        assert_eq!(r.mae, (9000.0 + 7000.0 + 8000.0 + 5000.0) / 4.0);
        assert_eq!((r.underestimates, r.mean_corrections), (0.0, 0.0));

        let r = row(&e, Predictor::EasyPlusPlus, Correction::None);
        assert_eq!(r.within_20, 0.25);
        assert_eq!(r.mae, (9000.0 + 7000.0 + 0.0 + 2500.0) / 4.0);
        assert_eq!(r.underestimates, 0.25);

        // Simple: job 3 (2000 predicted, 2000 run) is still running 60 s before: one hour
        // more, 5600 (error 3600); job 4: 2500 → 6100 (error 1100), one correction each.
        let r = row(&e, Predictor::EasyPlusPlus, Correction::Simple);
        assert_eq!(r.mae, (9000.0 + 7000.0 + 3600.0 + 1100.0) / 4.0);
        assert_eq!(
            (r.underestimates, r.mean_corrections, r.within_20),
            (0.0, 0.5, 0.0)
        );

        // Power: job 3: 2000 → 2900 (one); job 4: 2500 → 3400 → 5200 (two).
        let r = row(&e, Predictor::EasyPlusPlus, Correction::Power);
        assert_eq!(r.mae, (9000.0 + 7000.0 + 900.0 + 200.0) / 4.0);
        assert_eq!(
            (r.underestimates, r.mean_corrections, r.within_20),
            (0.0, 0.75, 0.25),
            "job 4 within 20 %"
        );

        // AdaBoost without enough history falls back to the request.
        assert_eq!(
            row(&e, Predictor::AdaBoost, Correction::Power).mae,
            29000.0 / 4.0
        );
    }

    #[test]
    fn no_future_leakage() {
        // Job 2 is submitted before job 1 ends: EASY++ cannot use job 1 for it.
        let jobs = vec![
            job(0, "a", 9000, 0, 100),
            job(1, "a", 9000, 0, 100),
            job(2, "a", 9000, 50, 100),
        ];
        let p = predictions(&jobs, &Params::default()).unwrap();
        assert!(!p[2].1);
        assert_eq!(p[2].0[1], 9000);
    }
}
