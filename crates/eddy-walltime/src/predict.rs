//! The predictors: the user's request (the baseline), EASY++ (the mean of the user's last
//! two runtimes, Tsafrir et al.) and the regression (AdaBoost.R2 over decision trees on the
//! features user, requested CPUs, memory and walltime). A prediction never exceeds the
//! request.

use crate::adaboost::AdaBoost;
use crate::Job;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Tunables of the predictors (defaults documented on each field).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// Boosting rounds (trees) of the regression; default 30.
    pub rounds: usize,
    /// Depth of each tree; default 6.
    pub depth: u16,
    /// Finished jobs needed before the regression predicts (before: the request); default 20.
    pub min_train: usize,
    /// In replay, the model is fitted again once this many more jobs have finished; default 10.
    pub retrain_after: usize,
    /// The regression learns from at most this many most recently finished jobs; default 2000.
    pub max_train: usize,
    /// The cap of a job without a limit (seconds); default 7 days.
    pub no_limit: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            rounds: 30,
            depth: 6,
            min_train: 20,
            retrain_after: 10,
            max_train: 2000,
            no_limit: 7 * 86400,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Predictor {
    Request,
    #[serde(rename = "easy++")]
    EasyPlusPlus,
    #[serde(rename = "adaboost")]
    AdaBoost,
}

impl Predictor {
    pub const ALL: [Predictor; 3] = [
        Predictor::Request,
        Predictor::EasyPlusPlus,
        Predictor::AdaBoost,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Predictor::Request => "request",
            Predictor::EasyPlusPlus => "easy++",
            Predictor::AdaBoost => "adaboost",
        }
    }
}

/// The most a job's prediction may be: its request, or `no_limit` without one.
pub fn cap(job: &Job, params: &Params) -> u64 {
    job.limit.unwrap_or(params.no_limit)
}

/// EASY++: the mean of the user's last two runtimes (oldest first in `runtimes`), capped by
/// the request; `None` with fewer than two.
pub fn easy(runtimes: &[u64], cap: u64) -> Option<u64> {
    match runtimes {
        [.., a, b] => Some(((a + b) / 2).min(cap)),
        _ => None,
    }
}

/// Users as numbers for the trees: each user's code is the order in which it was first seen.
#[derive(Debug, Default, Clone)]
pub struct Users(HashMap<String, f64>);

impl Users {
    pub fn code(&mut self, user: &str) -> f64 {
        let next = self.0.len() as f64;
        *self.0.entry(user.to_string()).or_insert(next)
    }
}

/// The regression's features of a job: user, requested CPUs, memory (MB) and walltime (s),
/// −1 where unknown.
pub fn features(job: &Job, users: &mut Users) -> Vec<f64> {
    vec![
        users.code(&job.user),
        f64::from(job.cpus),
        job.mem_mb.unwrap_or(-1.0),
        job.limit.map(|l| l as f64).unwrap_or(-1.0),
    ]
}

/// The regression fitted on finished jobs.
pub struct Regression {
    model: AdaBoost,
}

impl Regression {
    /// Fit on `jobs` (all finished); `None` when fewer than `min_train`.
    pub fn fit(jobs: &[&Job], users: &mut Users, params: &Params) -> Result<Option<Regression>> {
        if jobs.len() < params.min_train.max(1) {
            return Ok(None);
        }
        let x: Vec<Vec<f64>> = jobs.iter().map(|j| features(j, users)).collect();
        let y: Vec<f64> = jobs.iter().map(|j| j.runtime as f64).collect();
        Ok(Some(Regression {
            model: AdaBoost::fit(&x, &y, params.rounds, params.depth)?,
        }))
    }

    /// The predicted runtime of `job`, between 1 s and its cap.
    pub fn predict(&self, job: &Job, users: &mut Users, params: &Params) -> Result<u64> {
        let p = self.model.predict(&[features(job, users)])?;
        let v = p.first().copied().unwrap_or(0.0);
        Ok((v.max(1.0).round() as u64).min(cap(job, params)))
    }
}

/// What `eddy walltime predict` answers for one job from a history of finished jobs.
#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    pub request: u64,
    #[serde(rename = "easy++")]
    pub easy: Option<u64>,
    pub adaboost: Option<u64>,
    /// The predictor used: the available one with the lowest mean absolute error (without
    /// correction) when the history is replayed; the request without history.
    pub used: Predictor,
    pub walltime: u64,
}

/// The predictors fitted once on a history, for as many jobs as asked (`eddy bb` asks one
/// model per user for every job of that user on the machine): each user's last two runtimes
/// (EASY++), the regression over the most recent `max_train` jobs, and the replay's errors
/// that choose between them.
pub struct Model {
    params: Params,
    /// Each user's last two runtimes, oldest first.
    last_two: HashMap<String, Vec<u64>>,
    users: Users,
    regression: Option<Regression>,
    /// Mean absolute error (without correction) of each predictor over the replayed history.
    mae: HashMap<Predictor, f64>,
    /// The history rows fitted and replayed.
    pub rows: usize,
}

impl Model {
    /// Fit on `history` (finished jobs, any order).
    pub fn fit(history: &[Job], params: &Params) -> Result<Model> {
        let mut recent: Vec<&Job> = history.iter().collect();
        recent.sort_by_key(|h| h.end);
        let mut last_two: HashMap<String, Vec<u64>> = HashMap::new();
        for h in &recent {
            let r = last_two.entry(h.user.clone()).or_default();
            r.push(h.runtime);
            if r.len() > 2 {
                r.remove(0);
            }
        }
        let mut users = Users::default();
        let skip = recent.len().saturating_sub(params.max_train);
        let regression = Regression::fit(&recent[skip..], &mut users, params)?;
        let evaluation = crate::replay(history, params)?;
        let mae = evaluation
            .rows
            .iter()
            .filter(|r| r.correction == crate::Correction::None)
            .map(|r| (r.predictor, r.mae))
            .collect();
        Ok(Model {
            params: params.clone(),
            last_two,
            users,
            regression,
            mae,
            rows: history.len(),
        })
    }

    /// Predict `job` (its user, cpus, memory and limit; times unused).
    pub fn predict(&mut self, job: &Job) -> Result<Prediction> {
        let params = &self.params;
        let request = cap(job, params);
        let easy = easy(
            self.last_two
                .get(&job.user)
                .map(Vec::as_slice)
                .unwrap_or_default(),
            request,
        );
        let adaboost = match &self.regression {
            Some(r) => Some(r.predict(job, &mut self.users, params)?),
            None => None,
        };
        let mae = |p: Predictor| self.mae.get(&p).copied().unwrap_or(f64::INFINITY);
        let mut used = Predictor::Request;
        for (p, available) in [
            (Predictor::EasyPlusPlus, easy.is_some()),
            (Predictor::AdaBoost, adaboost.is_some()),
        ] {
            if available && mae(p) < mae(used) {
                used = p;
            }
        }
        let walltime = match used {
            Predictor::Request => request,
            Predictor::EasyPlusPlus => easy.unwrap_or(request),
            Predictor::AdaBoost => adaboost.unwrap_or(request),
        };
        Ok(Prediction {
            request,
            easy,
            adaboost,
            used,
            walltime,
        })
    }
}

/// Predict `job` (its user, cpus, memory and limit; times unused) from `history`.
pub fn predict(history: &[Job], job: &Job, params: &Params) -> Result<Prediction> {
    Model::fit(history, params)?.predict(job)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn job(id: u32, user: &str, limit: u64, submit: i64, runtime: u64) -> Job {
        Job {
            id: id.to_string(),
            user: user.to_string(),
            cpus: 1,
            mem_mb: Some(1000.0),
            limit: Some(limit),
            submit,
            start: submit,
            end: submit + runtime as i64,
            runtime,
        }
    }

    #[test]
    fn easy_is_the_mean_of_the_last_two() {
        assert_eq!(easy(&[], 100), None);
        assert_eq!(easy(&[40], 100), None);
        assert_eq!(easy(&[40, 60], 100), Some(50));
        assert_eq!(easy(&[1000, 40, 61], 100), Some(50));
        assert_eq!(easy(&[300, 500], 100), Some(100), "never past the request");
    }

    #[test]
    fn adaboost_learns_half_the_request_and_beats_it_on_held_out_jobs() {
        // Two user classes: "short" users run 0.5 × their request, "long" users 0.9 ×; the
        // requests vary. Train on the first 240 jobs, test on the next 60.
        let mut jobs = Vec::new();
        for i in 0..300u32 {
            let user = format!("user{}", i % 6);
            let factor = if i % 6 < 3 { 0.5 } else { 0.9 };
            let limit = 3600 * (1 + u64::from(i * 7 % 12));
            let runtime = (limit as f64 * factor) as u64 + u64::from(i % 5) * 10;
            jobs.push(job(i, &user, limit, i64::from(i) * 100_000, runtime));
        }
        let params = Params::default();
        let (train, test) = jobs.split_at(240);
        let train: Vec<&Job> = train.iter().collect();
        let mut users = Users::default();
        let model = Regression::fit(&train, &mut users, &params)
            .unwrap()
            .unwrap();
        let mut mae_boost = 0.0;
        let mut mae_request = 0.0;
        for j in test {
            let p = model.predict(j, &mut users, &params).unwrap();
            mae_boost += (p as f64 - j.runtime as f64).abs() / test.len() as f64;
            mae_request += (j.limit.unwrap() as f64 - j.runtime as f64).abs() / test.len() as f64;
        }
        assert!(
            mae_boost < mae_request / 4.0,
            "adaboost MAE {mae_boost} vs request {mae_request}"
        );
    }

    #[test]
    fn one_model_predicts_many_jobs_as_predict_does_each() {
        let history: Vec<Job> = (0..40)
            .map(|i| {
                job(
                    i,
                    if i % 2 == 0 { "u" } else { "v" },
                    7200,
                    i64::from(i) * 1000,
                    600 + u64::from(i),
                )
            })
            .collect();
        let params = Params::default();
        let mut model = Model::fit(&history, &params).unwrap();
        assert_eq!(model.rows, 40);
        for (user, limit) in [("u", 7200), ("v", 600), ("w", 3600), ("u", 100)] {
            let j = job(99, user, limit, 0, 0);
            let one = predict(&history, &j, &params).unwrap();
            let many = model.predict(&j).unwrap();
            assert_eq!(
                (one.request, one.easy, one.adaboost, one.used, one.walltime),
                (
                    many.request,
                    many.easy,
                    many.adaboost,
                    many.used,
                    many.walltime
                ),
                "{user} {limit}"
            );
        }
    }

    #[test]
    fn predict_from_a_history_prefers_the_accurate_predictor() {
        // One user whose runs repeat 600 s under a 2-h request: EASY++ is exact.
        let history: Vec<Job> = (0..30)
            .map(|i| job(i, "u", 7200, i64::from(i) * 1000, 600))
            .collect();
        let p = predict(&history, &job(99, "u", 7200, 0, 0), &Params::default()).unwrap();
        assert_eq!(p.request, 7200);
        assert_eq!(p.easy, Some(600));
        assert!(p.adaboost.is_some());
        assert_ne!(p.used, Predictor::Request);
        assert!(p.walltime <= 7200);
        let none = predict(&[], &job(1, "v", 3600, 0, 0), &Params::default()).unwrap();
        assert_eq!(
            (none.used, none.walltime, none.easy, none.adaboost),
            (Predictor::Request, 3600, None, None)
        );
    }
}
