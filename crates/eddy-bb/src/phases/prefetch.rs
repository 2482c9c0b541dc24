//! A job's `#EDDY prefetch` trees (decision 0071): fetched into the cache beside the job,
//! which does not wait for them. Once the job's deployment is up and its stage-in done
//! (pre_run), `eddy prefetch --background` starts as the job's user, never as root or
//! SlurmUser: its uid, gid and groups are the user's before it runs, it reads the user's
//! copy of the deployment file in `user/` and writes its results to `user/prefetch.log`, so
//! nothing it produces is read by root. Root keeps only its pid and start time in the job's
//! record (root's), and ends it when the job ends (data_out, teardown), never signalling a
//! reused pid; the prefetch also gives up by itself once `user/deployment.toml` is gone.

use crate::job::{JobDir, JobRecord};
use anyhow::{Context, Result};
use eddy_deploy::prefetch::{self, AsUser};
use eddy_deploy::{Say, StateDir};

/// Starts the job's prefetch (once: a rerun finds it recorded), as the job's user.
pub fn start(jd: &JobDir, rec: &mut JobRecord, say: Say) -> Result<()> {
    if rec.request.prefetch.is_empty() || rec.prefetch_pid.is_some() {
        return Ok(());
    }
    let exe = std::env::current_exe().context("cannot find the eddy program")?;
    let user = AsUser {
        uid: rec.uid,
        gid: rec.gid,
        groups: crate::as_user::groups_of(rec.uid, rec.gid)?,
    };
    let state = StateDir::new(&jd.user_dir());
    let child = prefetch::start_background(&exe, &state, &rec.request.prefetch, Some(user))
        .context("cannot start the job's prefetch")?;
    let p = eddy_deploy::procs::record("prefetch".into(), &child);
    rec.prefetch_pid = Some(p.pid);
    rec.prefetch_start_time = Some(p.start_time);
    jd.save(rec)?;
    say.out(&format!(
        "eddy: job {}: prefetching {} beside the job (pid {}, as uid {}); results in {}",
        rec.job,
        rec.request.prefetch.join(" "),
        p.pid,
        rec.uid,
        state.dir().join(prefetch::LOG).display()
    ));
    Ok(())
}

/// Ends the job's prefetch if it still runs (SIGTERM, SIGKILL past a grace).
pub fn stop(rec: &JobRecord) {
    eddy_deploy::procs::end_recorded(
        "prefetch",
        rec.prefetch_pid,
        rec.prefetch_start_time,
        prefetch::STOP_GRACE,
    );
}
