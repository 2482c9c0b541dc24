//! A private Prometheus server for tests (Debian's `prometheus` package, which
//! `scripts/install-deps.sh` installs): started with the configuration the guide gives sites
//! (`honor_labels: false`, targets by file-based service discovery from `eddy status
//! --prometheus`), scraping every second, its own storage in a temporary directory and a free port
//! on 127.0.0.1 (never the system service the package may start), asked through its HTTP API
//! (`/api/v1/query`), and killed when dropped. Missing, the test fails (`require`). Also a
//! plain HTTP GET for fetching an endpoint directly.

use crate::cli::free_port;
use crate::require;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long the server may take to become ready.
const READY_BOUND: Duration = Duration::from_secs(60);
/// Pause between polls of the server.
const POLL: Duration = Duration::from_millis(250);

/// A running Prometheus server of the test's own.
pub struct Prometheus {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// A GET of `url`: the status and the body (any status; a connection failure is an error).
pub fn http_get(url: &str) -> Result<(u16, String), String> {
    get_with(url, &[])
}

/// A GET of `url` with the query parameters `query` (encoded by ureq).
fn get_with(url: &str, query: &[(&str, &str)]) -> Result<(u16, String), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut response = agent
        .get(url)
        .query_pairs(query.iter().copied())
        .call()
        .map_err(|e| format!("GET {url}: {e}"))?;
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("GET {url}: reading the body: {e}"))?;
    Ok((status, body))
}

impl Prometheus {
    /// Starts a server that scrapes every second, in one scrape job, the target groups of
    /// each of `groups` (a file-based service discovery file each: what `eddy status
    /// --prometheus` prints), with `honor_labels: false` as the guide tells sites to: the
    /// groups' labels (`job`) are the scrape's, a target's own become `exported_*`. Returns
    /// once it is ready.
    #[track_caller]
    pub fn start(groups: &[String]) -> Prometheus {
        let bin = require::program("prometheus", "prometheus");
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut files = Vec::new();
        for (i, g) in groups.iter().enumerate() {
            let file = dir.path().join(format!("targets-{i}.json"));
            std::fs::write(&file, g).expect("write a targets file");
            files.push(file.display().to_string());
        }
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, scrape_config(&files)).expect("write prometheus.yml");
        let data = dir.path().join("data");
        let log = dir.path().join("prometheus.log");
        let port = free_port();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).expect("prometheus log"))
            .stderr(std::fs::File::create(&log).expect("prometheus log"))
            .spawn()
            .expect("start prometheus");
        let mut p = Prometheus {
            child,
            port,
            log,
            _dir: dir,
        };
        p.wait_ready();
        p
    }

    /// The server's base URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    #[track_caller]
    fn wait_ready(&mut self) {
        let ready = crate::eventually::poll_every(READY_BOUND, POLL, || {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "prometheus exited ({status}) at start:\n{}",
                    self.log_text()
                );
            }
            matches!(http_get(&format!("{}/-/ready", self.url())), Ok((200, _))).then_some(())
        });
        assert!(
            ready.is_some(),
            "prometheus was not ready within {READY_BOUND:?}:\n{}",
            self.log_text()
        );
    }

    /// An instant query: the `data.result` array of the answer (vector results).
    #[track_caller]
    pub fn query(&self, promql: &str) -> Vec<serde_json::Value> {
        let url = format!("{}/api/v1/query", self.url());
        let (status, body) = get_with(&url, &[("query", promql)]).unwrap_or_else(|e| panic!("{e}"));
        let v: serde_json::Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("query {promql}: not JSON ({e}): {body}"));
        assert_eq!(
            (status, v["status"].as_str()),
            (200, Some("success")),
            "query {promql}: {body}"
        );
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// The value of a query answered with one sample (e.g. a `sum(...)`); `None` while it
    /// has none (nothing scraped yet).
    #[track_caller]
    pub fn scalar(&self, promql: &str) -> Option<f64> {
        let result = self.query(promql);
        let sample = result.first()?;
        let text = sample["value"][1].as_str().expect("a sample value");
        Some(text.parse().expect("a number"))
    }

    /// Polls `promql` until `done` accepts its value, within `bound`; returns that value.
    /// On timeout the test fails with the last value and the targets' state.
    #[track_caller]
    pub fn wait_for(&self, promql: &str, bound: Duration, done: impl Fn(f64) -> bool) -> f64 {
        let mut last = None;
        let got = crate::eventually::poll_every(bound, POLL, || {
            last = self.scalar(promql);
            last.filter(|&v| done(v))
        });
        match got {
            Some(v) => v,
            None => {
                let targets = http_get(&format!("{}/api/v1/targets", self.url()))
                    .map(|(_, b)| b)
                    .unwrap_or_else(|e| e);
                panic!(
                    "`{promql}` did not reach the expected value within {bound:?} (last: {last:?})\n\
                     targets: {targets}\nlog:\n{}",
                    self.log_text()
                );
            }
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The configuration: the target groups of `files`, in one scrape job, each second; the
/// groups' labels win over the targets' own (`honor_labels: false`, the guide's).
fn scrape_config(files: &[String]) -> String {
    let list: Vec<String> = files.iter().map(|t| format!("'{t}'")).collect();
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         scrape_configs:\n  - job_name: eddy\n    honor_labels: false\n    file_sd_configs:\n      \
         - files: [{}]\n        refresh_interval: 1s\n",
        list.join(", ")
    )
}
