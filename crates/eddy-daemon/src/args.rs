//! Command line of eddyd and its resolution into the settings a daemon runs with.

use crate::DaemonError;
use eddy_config::{Config, Deployment};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Environment variable holding the deployment secret (hex) when no file is given.
pub const SECRET_ENV: &str = "EDDY_SECRET";

/// Name of the default unix socket inside the root.
pub const SOCKET_FILE: &str = "eddyd.sock";

/// Command line of `eddyd`.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "eddyd", about = "The Eddy storage daemon: one per node")]
pub struct DaemonArgs {
    /// Storage root (created if missing): metadata, chunks, socket and ready file live here.
    #[arg(long)]
    pub root: PathBuf,
    /// Listeners left open by this program before it restarted itself in place
    /// (`tcp=FD[,metrics=FD]`; decision 0060). Given by the daemon only.
    #[arg(long, hide = true)]
    pub inherit_listeners: Option<String>,
    /// TCP listen address; default 0.0.0.0:<config port>. Port 0 picks any free port.
    #[arg(long)]
    pub listen: Option<String>,
    /// Unix socket for clients on this node; default ROOT/eddyd.sock; "none" disables it.
    #[arg(long)]
    pub socket: Option<String>,
    /// Stable id of this daemon in the deployment.
    #[arg(long, default_value_t = 0)]
    pub id: u32,
    /// Host name reported in status; default: the system host name.
    #[arg(long)]
    pub host: Option<String>,
    /// File holding the deployment secret in hex (else --deployment's, else EDDY_SECRET).
    #[arg(long)]
    pub secret_file: Option<PathBuf>,
    /// A deployment.toml to take the secret and the config from (explicit flags override).
    #[arg(long)]
    pub deployment: Option<PathBuf>,
    /// TOML file with any subset of the config fields; overrides the deployment's config.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Chunk size in bytes; overrides the config.
    #[arg(long)]
    pub chunk_size: Option<u64>,
    /// Ids of every daemon of the deployment, comma-separated (e.g. 0,1,2): which children
    /// of a linked backend directory this daemon imports, and the placement it follows until
    /// it adopts a membership (decision 0081). Needed when links are configured; default: the
    /// daemons --deployment places on (its members; while items move, those they move from).
    #[arg(long, value_delimiter = ',')]
    pub members: Option<Vec<u32>>,
    /// The deployment file to read the other daemons' addresses from when copies of
    /// metadata go to them (`replicas` > 1; read when needed, so it may be written after
    /// the daemons start). Default: --deployment.
    #[arg(long)]
    pub peers: Option<PathBuf>,
    /// Rejoin (replicas > 1, decision 0021): serve peers only and take the changes missed
    /// from the other daemons before serving clients. Implied when the daemon starts on a
    /// store it used before (a restart).
    #[arg(long)]
    pub rejoin: bool,
    /// With --rejoin: a full resync, every peer sends every item this daemon owns (a
    /// replacement on an empty root; `eddy replace`).
    #[arg(long, requires = "rejoin")]
    pub full: bool,
    /// Log level or tracing filter, e.g. "debug" or "eddy_daemon=debug,fjall=warn".
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// Run as this user (name or uid, with its groups): started by root, the daemon creates
    /// the root owned by the user (mode 0700), reads the secret and config, then drops to the
    /// user's ids before it opens the store or a socket. For deployments made for one job.
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// Serve `GET /metrics` for Prometheus on this IP:PORT (port 0: any free one, told in
    /// the ready file); overrides the config's `metrics_addr`. A daemon that cannot bind it
    /// does not start.
    #[arg(long, value_name = "IP:PORT")]
    pub metrics: Option<String>,
    /// The job the deployment serves (its Slurm job id, else the deployment's name), as the
    /// daemon's counters name it (`eddy stats`, decision 0032). Default: --deployment's.
    #[arg(long)]
    pub job: Option<String>,
}

/// Everything a daemon needs to run, resolved from `DaemonArgs` (or built directly by tests).
#[derive(Debug, Clone)]
pub struct DaemonSettings {
    pub root: PathBuf,
    pub listen: SocketAddr,
    /// Unix socket path, or `None` for no unix socket.
    pub socket: Option<PathBuf>,
    pub id: u32,
    pub host: String,
    pub secret: Vec<u8>,
    pub config: Config,
    /// Ids of every daemon of the deployment (see `DaemonArgs::members`).
    pub members: Option<Vec<u32>>,
    /// The deployment file naming the other daemons (see `DaemonArgs::peers`).
    pub peers: Option<PathBuf>,
    /// Rejoin before serving clients (see `DaemonArgs::rejoin`); set at start too when the
    /// store was used before.
    pub rejoin: bool,
    /// A full resync while rejoining (see `DaemonArgs::full`).
    pub full: bool,
    /// Where to serve `/metrics` (`DaemonArgs::metrics`, else the config's `metrics_addr`);
    /// `None`: no endpoint.
    pub metrics: Option<SocketAddr>,
    /// The job its counters name (see `DaemonArgs::job`); empty when unknown.
    pub job: String,
    /// Listeners to serve on instead of binding (see `DaemonArgs::inherit_listeners`).
    pub inherited: crate::respawn::Inherited,
    /// Whether the daemon may restart itself in place (`respawn`): not when root started it
    /// with `--user`, since the user it became cannot read root's secret and config files
    /// again.
    pub restart_in_place: bool,
    /// The membership epoch of the deployment file it started from (decision 0081; 0
    /// without one): the epoch it serves until it adopts a newer membership.
    pub epoch: u64,
}

impl DaemonSettings {
    /// Settings for a daemon on `root` listening on `listen`, with the default socket,
    /// id 0, the system host name and the given secret and config; no metrics endpoint
    /// (set `metrics` for one).
    pub fn new(root: &Path, listen: SocketAddr, secret: Vec<u8>, config: Config) -> DaemonSettings {
        DaemonSettings {
            root: root.to_owned(),
            listen,
            socket: Some(root.join(SOCKET_FILE)),
            id: 0,
            host: system_host_name(),
            secret,
            config,
            members: None,
            peers: None,
            rejoin: false,
            full: false,
            metrics: None,
            job: String::new(),
            inherited: Default::default(),
            restart_in_place: false,
            epoch: 0,
        }
    }

    /// Resolves the command line: reads the deployment, config and secret files.
    pub fn from_args(args: &DaemonArgs) -> Result<DaemonSettings, DaemonError> {
        let deployment = args
            .deployment
            .as_deref()
            .map(Deployment::load)
            .transpose()?;
        let config = resolve_config(args, deployment.as_ref())?;
        let secret = resolve_secret(args, deployment.as_ref())?;
        let listen_text = args
            .listen
            .clone()
            .unwrap_or_else(|| format!("0.0.0.0:{}", config.port));
        let listen = listen_text.parse::<SocketAddr>().map_err(|e| {
            DaemonError::Args(format!(
                "--listen {listen_text:?} is not an ip:port address: {e}"
            ))
        })?;
        // The placement clients use by that file: while items move (decision 0081), that of
        // the daemons they move from; a membership adopted later replaces it.
        let members = args
            .members
            .clone()
            .or_else(|| deployment.as_ref().map(Deployment::placed_on));
        if !config.links.is_empty() && members.is_none() {
            return Err(DaemonError::Args(
                "backend links are configured but --members is missing: pass the ids of every \
                 daemon of the deployment (eddy start does)"
                    .into(),
            ));
        }
        let metrics = args
            .metrics
            .as_deref()
            .or(config.metrics_addr.as_deref())
            .map(eddy_config::metrics_socket_addr)
            .transpose()?;
        let socket = match args.socket.as_deref() {
            Some("none") => None,
            Some(p) => Some(PathBuf::from(p)),
            None => Some(args.root.join(SOCKET_FILE)),
        };
        Ok(DaemonSettings {
            root: args.root.clone(),
            listen,
            socket,
            id: args.id,
            host: args.host.clone().unwrap_or_else(system_host_name),
            secret,
            config,
            members,
            peers: args.peers.clone().or_else(|| args.deployment.clone()),
            rejoin: args.rejoin,
            full: args.full,
            metrics,
            job: args
                .job
                .clone()
                .or_else(|| deployment.as_ref().map(|d| d.job.label(&d.name)))
                .unwrap_or_default(),
            inherited: args
                .inherit_listeners
                .as_deref()
                .map(crate::respawn::Inherited::parse)
                .transpose()
                .map_err(DaemonError::Args)?
                .unwrap_or_default(),
            restart_in_place: args.user.is_none(),
            epoch: deployment.as_ref().map_or(0, |d| d.epoch),
        })
    }
}

/// The deployment's config (or the default), overlaid with the --config file's fields and
/// then --chunk-size; validated.
fn resolve_config(
    args: &DaemonArgs,
    deployment: Option<&Deployment>,
) -> Result<Config, DaemonError> {
    let mut config = deployment.map(|d| d.config.clone()).unwrap_or_default();
    if let Some(path) = &args.config {
        config = overlay_config(&config, path)?;
    }
    if let Some(cs) = args.chunk_size {
        config.chunk_size = cs;
    }
    config.validate()?;
    Ok(config)
}

/// Applies the fields present in a TOML file on top of `base`.
fn overlay_config(base: &Config, path: &Path) -> Result<Config, DaemonError> {
    let parse_err = |message: String| eddy_config::ConfigError::Parse {
        path: path.to_owned(),
        message,
    };
    // privileged-path: --config, named by root's launcher: the state directory's config.toml (root's, 0600)
    let text = std::fs::read_to_string(path).map_err(|source| eddy_config::ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let overlay: toml::Table = toml::from_str(&text).map_err(|e| parse_err(e.to_string()))?;
    let mut merged = toml::Table::try_from(base).map_err(|e| parse_err(e.to_string()))?;
    merged.extend(overlay);
    let config: Config = toml::Value::Table(merged)
        .try_into()
        .map_err(|e: toml::de::Error| parse_err(e.to_string()))?;
    Ok(config)
}

/// The secret: --secret-file, else the deployment's (both named on the command line), else
/// the ambient EDDY_SECRET.
fn resolve_secret(
    args: &DaemonArgs,
    deployment: Option<&Deployment>,
) -> Result<Vec<u8>, DaemonError> {
    let (source_name, hex_text) = if let Some(path) = &args.secret_file {
        // privileged-path: --secret-file, named by root's launcher in root's state directory
        let text = std::fs::read_to_string(path).map_err(|e| DaemonError::Secret {
            source_name: path.display().to_string(),
            message: format!("cannot read it: {e}"),
        })?;
        (path.display().to_string(), text)
    } else if let Some(d) = deployment {
        ("the deployment file".to_string(), d.secret.clone())
    } else if let Ok(text) = std::env::var(SECRET_ENV) {
        (SECRET_ENV.to_string(), text)
    } else {
        return Err(DaemonError::NoSecret);
    };
    decode_secret(&source_name, &hex_text)
}

fn decode_secret(source_name: &str, hex_text: &str) -> Result<Vec<u8>, DaemonError> {
    let secret_err = |message: String| DaemonError::Secret {
        source_name: source_name.to_string(),
        message,
    };
    let bytes = hex::decode(hex_text.trim()).map_err(|e| secret_err(format!("not hex: {e}")))?;
    if bytes.is_empty() {
        return Err(secret_err("the secret is empty".into()));
    }
    Ok(bytes)
}

/// The system host name, or "localhost" if it cannot be read.
pub fn system_host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(extra: &[&str]) -> DaemonArgs {
        let mut argv = vec!["eddyd", "--root", "/tmp/r"];
        argv.extend_from_slice(extra);
        DaemonArgs::try_parse_from(argv).unwrap()
    }

    #[test]
    fn secret_file_and_overrides() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("s");
        std::fs::write(&secret, "abcd\n").unwrap();
        let cfg = dir.path().join("c.toml");
        std::fs::write(&cfg, "chunk_size = 65536\nport = 9000\n").unwrap();
        let s = secret.to_str().unwrap();
        let c = cfg.to_str().unwrap();
        let args = parse(&[
            "--secret-file",
            s,
            "--config",
            c,
            "--chunk-size",
            "131072",
            "--socket",
            "none",
        ]);
        let st = DaemonSettings::from_args(&args).unwrap();
        assert_eq!(st.secret, vec![0xab, 0xcd]);
        assert_eq!(st.config.chunk_size, 131072);
        assert_eq!(st.config.port, 9000);
        assert_eq!(st.listen.port(), 9000);
        assert_eq!(st.socket, None);
        assert_eq!(st.metrics, None);
        assert_eq!(st.config.rpc_timeout_ms, Config::default().rpc_timeout_ms);
    }

    #[test]
    fn bad_secret_and_bad_listen_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("s");
        std::fs::write(&secret, "zz").unwrap();
        let args = parse(&["--secret-file", secret.to_str().unwrap()]);
        let err = DaemonSettings::from_args(&args).unwrap_err().to_string();
        assert!(err.contains("not hex"), "{err}");
        std::fs::write(&secret, "00ff").unwrap();
        let args = parse(&[
            "--secret-file",
            secret.to_str().unwrap(),
            "--listen",
            "nowhere",
        ]);
        let err = DaemonSettings::from_args(&args).unwrap_err().to_string();
        assert!(err.contains("--listen"), "{err}");
        let args = parse(&[
            "--secret-file",
            secret.to_str().unwrap(),
            "--chunk-size",
            "10",
        ]);
        assert!(DaemonSettings::from_args(&args).is_err());
    }

    #[test]
    fn deployment_gives_secret_and_config_flags_override() {
        let dir = tempfile::tempdir().unwrap();
        let dep_path = dir.path().join("deployment.toml");
        let dep = Deployment {
            name: "job".into(),
            job: Default::default(),
            epoch: 0,
            moving_from: None,
            draining: Vec::new(),
            secret: "0102".into(),
            config: Config {
                chunk_size: 1 << 20,
                port: 7001,
                ..Config::default()
            },
            daemons: vec![eddy_config::DaemonEntry {
                id: 0,
                host: "h".into(),
                addr: "127.0.0.1:7001".into(),
                socket: None,
                root: "/r".into(),
                metrics: None,
            }],
        };
        dep.save(&dep_path).unwrap();
        let d = dep_path.to_str().unwrap();
        let st =
            DaemonSettings::from_args(&parse(&["--deployment", d, "--id", "3", "--host", "n1"]))
                .unwrap();
        assert_eq!(st.secret, vec![1, 2]);
        assert_eq!(
            (st.config.chunk_size, st.listen.port(), st.id),
            (1 << 20, 7001, 3)
        );
        assert_eq!(st.host, "n1");
        assert_eq!(st.socket, Some(PathBuf::from("/tmp/r/eddyd.sock")));
        let cfg = dir.path().join("c.toml");
        std::fs::write(&cfg, "readdir_page = 7\n").unwrap();
        let args = parse(&[
            "--deployment",
            d,
            "--config",
            cfg.to_str().unwrap(),
            "--chunk-size",
            "65536",
        ]);
        let st = DaemonSettings::from_args(&args).unwrap();
        assert_eq!(
            (st.config.chunk_size, st.config.readdir_page, st.config.port),
            (65536, 7, 7001)
        );
    }
}
