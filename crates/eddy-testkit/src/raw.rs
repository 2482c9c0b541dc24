//! Raw frames on a blocking connection that has done the handshake: for requests a
//! well-behaved client never sends. The frames go as they are, so the daemons must run
//! `wire = "clear"` (decision 0022).

use eddy_config::Deployment;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Writes one frame: `meta` (an encoded message) and `payload`.
pub fn put_frame(s: &mut TcpStream, id: u64, meta: &[u8], payload: &[u8]) -> std::io::Result<()> {
    let mut f = ((meta.len() + payload.len() + 12) as u32)
        .to_le_bytes()
        .to_vec();
    f.extend_from_slice(&id.to_le_bytes());
    f.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    f.extend_from_slice(meta);
    f.extend_from_slice(payload);
    s.write_all(&f)
}

/// Reads one frame.
pub fn get_frame(s: &mut TcpStream) -> std::io::Result<eddy_proto::frame::Frame> {
    let mut head = [0u8; eddy_proto::frame::HEADER_BYTES];
    s.read_exact(&mut head)?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let meta_len = u32::from_le_bytes([head[12], head[13], head[14], head[15]]) as usize;
    let mut rest = vec![0u8; len - 12];
    s.read_exact(&mut rest)?;
    let payload = rest.split_off(meta_len);
    let mut id = [0u8; 8];
    id.copy_from_slice(&head[4..12]);
    Ok(eddy_proto::frame::Frame {
        id: u64::from_le_bytes(id),
        meta: rest.into(),
        payload: payload.into(),
    })
}

/// A blocking connection to daemon `i` that has done the handshake with the secret.
pub fn authenticated(dep: &Deployment, i: usize) -> TcpStream {
    use eddy_proto::auth::{answer, HelloResult, ServerHello};
    let mut s = TcpStream::connect(&dep.daemons[i].addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let hello: ServerHello = eddy_proto::decode_plain(&get_frame(&mut s).unwrap(), 4096).unwrap();
    let reply = answer(&dep.secret_bytes().unwrap(), &hello);
    put_frame(&mut s, 0, &eddy_proto::encode(&reply).unwrap(), &[]).unwrap();
    let verdict = get_frame(&mut s).unwrap();
    eddy_proto::decode_plain::<HelloResult>(&verdict, 4096)
        .unwrap()
        .expect("authenticated");
    s
}

/// Sends `req` and returns the daemon's response.
pub fn call(s: &mut TcpStream, id: u64, req: &eddy_proto::Request) -> eddy_proto::Response {
    put_frame(s, id, &eddy_proto::encode(req).unwrap(), &req.payload()).unwrap();
    let frame = get_frame(s).expect("a reply");
    assert_eq!(frame.id, id);
    eddy_proto::response_from_frame(frame, 64 << 20).unwrap()
}
