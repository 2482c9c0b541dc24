//! The decoding target: bytes as they come off a socket.

use bytes::BytesMut;
use eddy_proto::auth::ClientHello;
use eddy_proto::frame::{Frame, FrameCodec, HEADER_BYTES};
use eddy_proto::path::{normalize, PathLimits};
use eddy_proto::{decode, decode_plain, response_from_frame, Inode, Request};
use tokio_util::codec::Decoder;

/// Frame size limits the input chooses from: the handshake's, a small one, the default.
const LIMITS: [u32; 3] = [4096, 64 * 1024, 64 * 1024 * 1024];

/// Feeds `data` to a frame decoder in pieces (the first byte chooses the piece size and the
/// size limit) and decodes every frame that comes out as a request, a reply and a handshake
/// message. Panics only on a bug: a panic inside the decoders, a frame over the limit, or a
/// decoded request that does not survive being encoded and decoded again.
pub fn frames(data: &[u8]) {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let max = LIMITS[usize::from(ctl % 3)];
    let step = 1 + usize::from(ctl / 3) % 64;
    let mut codec = FrameCodec::new(max);
    let mut buf = BytesMut::new();
    let mut fed = 0;
    loop {
        match codec.decode(&mut buf) {
            Ok(Some(frame)) => check_frame(frame, max),
            Ok(None) if fed < rest.len() => {
                let end = (fed + step).min(rest.len());
                buf.extend_from_slice(&rest[fed..end]);
                fed = end;
            }
            Ok(None) => {
                // The end of the stream: whatever is left is a whole frame or an error.
                if let Ok(Some(frame)) = codec.decode_eof(&mut buf) {
                    check_frame(frame, max);
                }
                break;
            }
            Err(_) => break,
        }
    }
    // The same bytes as one message body, a path and a stored record.
    let _ = decode::<Request>(rest, u64::from(max));
    let _ = Inode::from_record(rest);
    check_path(&String::from_utf8_lossy(rest));
}

fn check_frame(frame: Frame, max: u32) {
    let size = HEADER_BYTES + frame.meta.len() + frame.payload.len();
    assert!(
        size <= max as usize,
        "a frame of {size} bytes passed a limit of {max}"
    );
    let _ = decode_plain::<ClientHello>(&frame, u64::from(max));
    let _ = response_from_frame(frame.clone(), u64::from(max));
    let id = frame.id;
    if let Ok(req) = Request::from_frame(frame, u64::from(max)) {
        let _ = req.op_name();
        round_trip(id, &req);
    }
}

/// A decoded request encodes into a frame that decodes to the same request.
fn round_trip(id: u64, req: &Request) {
    let out = req
        .to_frame(id, u32::MAX)
        .unwrap_or_else(|e| panic!("a decoded request cannot be encoded: {e}: {req:?}"));
    let mut wire = Vec::with_capacity(out.len());
    ready(eddy_proto::frame::write_frames(
        &mut wire,
        std::slice::from_ref(&out),
    ))
    .expect("writing to a Vec");
    let mut bytes = BytesMut::from(&wire[..]);
    let frame = FrameCodec::new(u32::MAX)
        .decode(&mut bytes)
        .expect("an encoded frame decodes")
        .expect("an encoded frame is whole");
    assert_eq!(frame.id, id);
    let again = Request::from_frame(frame, u64::from(u32::MAX))
        .unwrap_or_else(|e| panic!("an encoded request does not decode: {e}: {req:?}"));
    assert_eq!(&again, req, "a request changed through encoding");
}

/// Normalisation accepts or refuses with EINVAL or ENAMETOOLONG, and a normalised path is
/// its own normal form.
fn check_path(p: &str) {
    let limits = PathLimits::default();
    match normalize(p, limits) {
        Ok(n) => {
            assert!(n.starts_with('/'), "{p:?} normalised to {n:?}");
            assert_eq!(normalize(&n, limits).as_deref(), Ok(n.as_str()), "{p:?}");
        }
        Err(e) => assert!(
            [libc::EINVAL, libc::ENAMETOOLONG].contains(&e.errno),
            "{p:?}: {e}"
        ),
    }
}

/// The output of a future that never waits (writing into a `Vec`).
fn ready<F: std::future::Future>(f: F) -> F::Output {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::pin!(f).poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("writing into a Vec waited"),
    }
}
