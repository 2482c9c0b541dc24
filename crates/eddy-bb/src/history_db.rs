//! Which I/O history database a user's command means (`eddy history`, the Python package's
//! `eddy.history`): the one named, else the `history_db` of a configuration file, else of the
//! burst-buffer site settings (with the password of the site's root-only `[history]
//! password_file` and its bounds), else the per-user default where `eddy stop` stores
//! profiles when nothing names a database.

use crate::site::{Site, DEFAULT_SITE};
use anyhow::{bail, Context, Result};
use std::path::Path;

/// The database spec (a path for SQLite, a `postgres://` URL) and how to reach it: `db`,
/// else the `history_db` of the configuration file `config`, else of the site settings
/// `site` (default `DEFAULT_SITE`, if present), else `eddy_history::user_default_db`.
pub fn spec(
    db: Option<&str>,
    config: Option<&Path>,
    site: Option<&Path>,
) -> Result<(String, eddy_history::Access)> {
    if let Some(db) = db {
        return Ok((db.to_string(), Default::default()));
    }
    if let Some(path) = config {
        let config = eddy_config::Config::load(path)
            .with_context(|| format!("fix the configuration file {}", path.display()))?;
        if let Some(db) = config.history_db {
            return Ok((db, Default::default()));
        }
    }
    let settings = Site::load(site)?;
    if let Some(db) = settings.history_db()? {
        return Ok((db, settings.history_access()?));
    }
    if let Some(db) = eddy_history::user_default_db() {
        return Ok((db.display().to_string(), Default::default()));
    }
    bail!(
        "no history database: give --db FILE (SQLite) or --db postgres://USER@HOST/DB \
         (PostgreSQL), or set history_db in the --config file or in the burst-buffer site \
         settings ({}), or set HOME for the default",
        site.map_or(DEFAULT_SITE.to_string(), |p| p.display().to_string())
    )
}
