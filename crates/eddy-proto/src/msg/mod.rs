//! Messages: the records they carry (`records`), the requests (`req`, one struct each, named
//! in one list: `table`), the replies (`replies`) and their encoding (`codec`). Bodies are bincode
//! with a size limit, so a hostile length field cannot make the decoder allocate more than
//! the frame it came in; bulk data travels as the frame's payload, outside the encoding.

mod codec;
mod records;
mod replies;
pub mod req;
mod table;

pub use codec::{decode, decode_plain, encode, encode_into};
pub use records::*;
pub use replies::*;
pub use table::{typed_reply, Bulk, Op, Props, Request, Rpc, OP_NAMES, TABLE_TEXT};

#[cfg(test)]
mod tests;
