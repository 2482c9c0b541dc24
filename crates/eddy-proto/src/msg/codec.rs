//! The encoding of message bodies: bincode with fixed-size integers and a size limit, so a
//! hostile length field cannot make the decoder allocate more than the frame it came in.

use crate::frame::Frame;
use crate::Errno;
use bincode::Options;
use serde::Serialize;

pub(super) fn codec() -> impl bincode::Options {
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .allow_trailing_bytes()
}

/// Encodes a message body.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, Errno> {
    codec()
        .serialize(msg)
        .map_err(|e| Errno::einval(format!("cannot encode message: {e}")))
}

/// Encodes a message body at the end of `w` (the frame's meta section).
pub fn encode_into<W: std::io::Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), Errno> {
    codec()
        .serialize_into(w, msg)
        .map_err(|e| Errno::einval(format!("cannot encode message: {e}")))
}

/// Bulk bytes kept out of the encoding: nothing is encoded in their place, and they decode
/// empty until the frame's payload is put back (`Request::from_frame`, `response_from_frame`).
pub(super) mod outside {
    use bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(_: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_unit()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        <()>::deserialize(d).map(|()| Bytes::new())
    }
}

pub(super) fn unexpected_payload(what: &str, len: usize) -> Errno {
    Errno::new(
        libc::EPROTO,
        format!("malformed message: {what} carries no payload, yet {len} bytes came"),
    )
}

/// Decodes a message that carries no payload (the handshake's): a payload is EPROTO.
pub fn decode_plain<T: serde::de::DeserializeOwned>(frame: &Frame, limit: u64) -> Result<T, Errno> {
    if !frame.payload.is_empty() {
        return Err(unexpected_payload("this message", frame.payload.len()));
    }
    decode(&frame.meta, limit)
}

/// Decodes a message body, allocating at most `limit` bytes; malformed input is EPROTO.
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], limit: u64) -> Result<T, Errno> {
    codec()
        .with_limit(limit)
        .deserialize(bytes)
        .map_err(|e| Errno::new(libc::EPROTO, format!("malformed message: {e}")))
}
