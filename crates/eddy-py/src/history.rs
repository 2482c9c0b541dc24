//! The I/O history (eddy-history's database, opened as `eddy history` opens it:
//! `eddy_bb::history_db::spec`): the listing, one job's profile and the import of Darshan
//! logs, each as the JSON `eddy history ... --json` prints, which the package turns into
//! plain dicts.

use pyo3::exceptions::{PyLookupError, PyOSError, PyRuntimeError};
use pyo3::prelude::*;
use std::path::PathBuf;

/// An error of the history (no database, a bad one, a log PyDarshan cannot read), with its
/// causes.
fn failed(e: anyhow::Error) -> PyErr {
    PyRuntimeError::new_err(format!("{e:#}"))
}

fn open(
    db: Option<&str>,
    config: Option<PathBuf>,
    site: Option<PathBuf>,
) -> anyhow::Result<eddy_history::HistoryDb> {
    let (spec, access) = eddy_bb::history_db::spec(db, config.as_deref(), site.as_deref())?;
    Ok(eddy_history::HistoryDb::open_with(&spec, &access)?)
}

fn json<T: serde::Serialize + ?Sized>(v: &T) -> PyResult<String> {
    serde_json::to_string(v).map_err(|e| PyOSError::new_err(format!("encoding JSON: {e}")))
}

/// The stored jobs matching the filters, newest first (`eddy history list --json`).
#[pyfunction]
#[pyo3(signature = (db=None, config=None, site=None, user=None, job_name=None, since=None, until=None, limit=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn history_list(
    py: Python<'_>,
    db: Option<String>,
    config: Option<PathBuf>,
    site: Option<PathBuf>,
    user: Option<String>,
    job_name: Option<String>,
    since: Option<f64>,
    until: Option<f64>,
    limit: Option<u64>,
) -> PyResult<String> {
    let filter = eddy_history::Filter {
        user,
        job_name,
        since,
        until,
        limit,
        ..Default::default()
    };
    let jobs = py
        .detach(|| -> anyhow::Result<_> { Ok(open(db.as_deref(), config, site)?.list(&filter)?) })
        .map_err(failed)?;
    let rows: Vec<eddy_history::JobSummary> =
        jobs.iter().map(eddy_history::JobSummary::of).collect();
    json(&rows)
}

/// One job's whole profile (`eddy history show JOB --json`): JOB its key or Slurm job id.
/// `LookupError` when there is none.
#[pyfunction]
#[pyo3(signature = (job, db=None, config=None, site=None))]
pub(crate) fn history_show(
    py: Python<'_>,
    job: String,
    db: Option<String>,
    config: Option<PathBuf>,
    site: Option<PathBuf>,
) -> PyResult<String> {
    let found = py
        .detach(|| -> anyhow::Result<_> {
            let mut h = open(db.as_deref(), config, site)?;
            let p = h.find(&job)?;
            Ok((p, h.name().to_string()))
        })
        .map_err(failed)?;
    match found {
        (Some(p), _) => json(&p),
        (None, name) => Err(PyLookupError::new_err(format!(
            "no job {job} in the history {name}"
        ))),
    }
}

/// Reads Darshan logs (with PyDarshan, as `eddy history import` does) and stores one
/// profile per log; the stored profiles. Every log is read before anything is stored.
#[pyfunction]
#[pyo3(signature = (files, db=None, config=None, site=None))]
pub(crate) fn history_import(
    py: Python<'_>,
    files: Vec<PathBuf>,
    db: Option<String>,
    config: Option<PathBuf>,
    site: Option<PathBuf>,
) -> PyResult<String> {
    let profiles = py
        .detach(|| -> anyhow::Result<_> {
            let profiles = eddy_history::darshan::import_logs(&files)?;
            let mut h = open(db.as_deref(), config, site)?;
            for p in &profiles {
                h.put(p).map_err(|e| {
                    anyhow::anyhow!("storing the profile {} in {}: {e}", p.key, h.name())
                })?;
            }
            Ok(profiles)
        })
        .map_err(failed)?;
    json(&profiles)
}
