//! End-to-end checksums on the client's side (decision 0019): the checksums a write batch
//! carries, and the check of a read reply before its bytes reach the caller. Kept apart from
//! the read and write fan-out so that it stays one call on each side of it.

use eddy_config::Config;
use eddy_proto::{checksum, Errno, Piece, ReadReply};

/// The checksums of a write batch's data (the pieces' bytes back to back); empty when the
/// deployment runs without checksums.
pub(crate) fn write_sums(cfg: &Config, pieces: &[Piece], data: &[u8]) -> Vec<u32> {
    if cfg.checksums {
        checksum::sums(pieces, data, cfg.checksum_block())
    } else {
        Vec::new()
    }
}

/// The bytes of daemon `daemon`'s reply to a read of `pieces` of `path`, after checking
/// them against the checksums it carries: a mismatch (the bytes were damaged on their way)
/// is EIO naming the path and offset, never data.
pub(crate) fn read_reply(
    cfg: &Config,
    reply: ReadReply,
    pieces: &[Piece],
    path: &str,
    daemon: u32,
) -> Result<bytes::Bytes, Errno> {
    match reply {
        ReadReply { data, sums: None } => Ok(data),
        ReadReply {
            data,
            sums: Some(sums),
        } => match checksum::verify(pieces, &data, &sums, cfg.checksum_block()) {
            Ok(None) => Ok(data),
            Ok(Some(m)) => Err(Errno::eio(format!(
                "{path}: the {} bytes at offset {} came from daemon {daemon} damaged \
                     (checksum mismatch in flight)",
                m.len,
                m.chunk * cfg.chunk_size + m.offset
            ))),
            Err(e) => Err(Errno::eio(format!(
                "{path}: daemon {daemon} replied to a read with {}",
                e.msg
            ))),
        },
    }
}

/// Whether a failed read was a daemon refusing to return damaged stored data.
pub(crate) fn is_damage(f: &eddy_rpc::Failure) -> bool {
    matches!(f, eddy_rpc::Failure::Daemon(e)
        if e.errno == libc::EIO && e.msg.contains("checksum mismatch"))
}

/// A read's error from a daemon: one about damaged stored data is renamed with the path
/// (the daemon names the file id, chunk and offset).
pub(crate) fn read_error(e: Errno, path: &str) -> Errno {
    if e.errno == libc::EIO && e.msg.contains("checksum mismatch") {
        Errno::eio(format!("{path}: {}", e.msg))
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_reply_is_eio_naming_path_and_offset() {
        let cfg = Config::default();
        let pieces = [Piece {
            chunk: 2,
            offset: 10,
            len: 100_000,
        }];
        let data = vec![7u8; 100_000];
        let sums = write_sums(&cfg, &pieces, &data);
        assert_eq!(sums.len(), 2);
        let ok = ReadReply {
            data: data.clone().into(),
            sums: Some(sums.clone()),
        };
        assert_eq!(
            read_reply(&cfg, ok, &pieces, "/f", 1).unwrap().len(),
            100_000
        );
        let mut bad = data;
        bad[70_000] = 0;
        let bad = ReadReply {
            data: bad.into(),
            sums: Some(sums),
        };
        let e = read_reply(&cfg, bad, &pieces, "/f", 1).unwrap_err();
        assert_eq!(e.errno, libc::EIO);
        let at = 2 * cfg.chunk_size + 65_536;
        assert!(
            e.msg.contains("/f") && e.msg.contains(&format!("offset {at}")),
            "{e}"
        );
        let off = Config {
            checksums: false,
            ..Config::default()
        };
        assert!(write_sums(&off, &pieces, &[0u8; 100_000]).is_empty());
    }
}
