//! `eddy bb`: the phases of Slurm's burst buffer (eddy-bb) dispatched from their arguments,
//! with what they say printed on the command's standard output and error.

use crate::cli::{BbArgs, BbPhase};
use anyhow::{Context, Result};
use eddy_bb::{as_user, phases, site};

pub fn bb(args: BbArgs) -> Result<()> {
    // Run as the job's user, who need not be able to read the site's settings.
    if let BbPhase::ResolvePaths { paths, bytes } = &args.phase {
        return resolve_paths(paths, *bytes);
    }
    let site = site::Site::load(args.site.as_deref())?;
    let say = crate::say();
    match args.phase {
        BbPhase::JobProcess { script } => phases::job_process(&site, &script),
        BbPhase::Pools => {
            outln!("{}", phases::pools(&site)?);
            Ok(())
        }
        BbPhase::Setup {
            job,
            uid,
            gid,
            pool: _,
            size: _,
            script,
        } => phases::setup(&site, job, uid, gid, &script, say),
        BbPhase::DataIn { job, script } => phases::data_in(&site, job, &script, say),
        BbPhase::RealSize { job } => phases::real_size(&site, job),
        BbPhase::Paths {
            job,
            script: _,
            path_file,
        } => phases::paths(&site, job, &path_file),
        BbPhase::PreRun { job, script: _ } => {
            phases::pre_run(&site, args.site.as_deref(), job, say)
        }
        BbPhase::PostRun { job, script: _ } => phases::post_run(&site, job),
        BbPhase::DataOut { job, script: _ } => phases::data_out(&site, job, say),
        BbPhase::Teardown {
            job,
            script: _,
            hurry,
        } => phases::teardown_detached(
            &site,
            args.site.as_deref(),
            job,
            phases::is_hurry(&hurry),
            say,
        ),
        BbPhase::TeardownNow { job, hurry } => {
            // The first words of the detached process: from here on it is in a session of
            // its own, and killing the caller's process group no longer reaches it.
            println!("eddy: tearing down job {job}");
            std::io::Write::flush(&mut std::io::stdout()).context("writing the teardown log")?;
            phases::teardown(&site, job, hurry, say)
        }
        BbPhase::GrowWatch { job } => eddy_bb::grow::watch(&site, job, say),
        BbPhase::Status { args: _ } => phases::status(&site, say),
        BbPhase::ResolvePaths { paths, bytes } => resolve_paths(&paths, bytes),
        BbPhase::NodeMount { state, mount } => phases::node_mount(&state, &mount),
        BbPhase::NodeClean { mount, root } => {
            phases::node_clean(mount.as_deref(), root.as_deref(), say)
        }
    }
}

/// `eddy bb resolve-paths [--bytes]`: the answers, one per line.
fn resolve_paths(paths: &[std::path::PathBuf], bytes: bool) -> Result<()> {
    let lines = if bytes {
        as_user::tree_bytes_here(paths)?
    } else {
        as_user::resolve_paths_here(paths)?
    };
    for line in lines {
        outln!("{line}");
    }
    Ok(())
}
