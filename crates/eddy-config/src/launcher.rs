//! The launcher template (`ssh {host} {cmd}`, `ip netns exec {host} {cmd}`, `{cmd}`): how a
//! command is run on a host, for the daemons (`eddy start`, the burst buffer), the health
//! probes (`eddy sysmap probe`) and the benchmark's workers alike.

use std::ffi::{OsStr, OsString};
use std::path::Path;

/// Launchers that hand their command to a shell on the other host, as one line of words
/// joined by spaces: each word of `{cmd}` must be quoted for that shell.
const REMOTE_SHELLS: &[&str] = &["ssh", "rsh", "pdsh", "clush", "mrsh"];

/// Replaces `{host}` and `{id}` in a template string.
pub fn fill(template: &str, host: &str, id: u32) -> String {
    template
        .replace("{host}", host)
        .replace("{id}", &id.to_string())
}

/// The launcher command line: the template split on whitespace, `{cmd}` replaced by the
/// command's arguments (as separate words; each quoted for the remote shell when the launcher
/// is one of `REMOTE_SHELLS`, so that no word, a path of a user's among them, is read as
/// shell syntax there) and `{host}`/`{id}` filled in.
pub fn argv(
    template: &str,
    host: &str,
    id: u32,
    cmd: &[OsString],
) -> Result<Vec<OsString>, String> {
    let words: Vec<&str> = template.split_whitespace().collect();
    if !words.contains(&"{cmd}") {
        return Err(format!(
            "launcher template {template:?} has no {{cmd}} word (e.g. `ssh {{host}} {{cmd}}`)"
        ));
    }
    let remote_shell = words.first().is_some_and(|w| {
        let name = Path::new(w).file_name().and_then(|n| n.to_str());
        name.is_some_and(|n| REMOTE_SHELLS.contains(&n))
    });
    let mut out = Vec::new();
    for w in words {
        if w == "{cmd}" {
            if remote_shell {
                out.extend(cmd.iter().map(|c| shell_quote(c)));
            } else {
                out.extend(cmd.iter().cloned());
            }
        } else {
            out.push(fill(w, host, id).into());
        }
    }
    Ok(out)
}

/// One word for a POSIX shell: in single quotes, each `'` written as `'\''`.
pub fn shell_quote(word: &OsStr) -> OsString {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let mut out = Vec::with_capacity(word.len() + 2);
    out.push(b'\'');
    for &b in word.as_bytes() {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    OsString::from_vec(out)
}
