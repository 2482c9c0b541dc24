//! Generators of the request fields the derived `arbitrary::Arbitrary` would make useless
//! (only with the `arbitrary` feature, which the fuzzer turns on): paths are drawn mostly
//! from a small alphabet of components, so that generated requests name the same entries
//! again and again, and reach a linked prefix (`/l`); now and then a path is any string.

use arbitrary::{Arbitrary, Result, Unstructured};
use bytes::Bytes;

/// Path components: the usual ones, the prefix a fuzzed daemon links (`/l`), the tricky ones
/// (`.`, `..`, a NUL, a name of 256 bytes, an empty one from `//`).
const COMPONENTS: [&str; 12] = [
    "a", "b", "d", "f", "l", "l", "x", "", ".", "..", "n\0ul", LONG_NAME,
];
const LONG_NAME: &str = concat!(
    "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn",
    "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn",
    "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"
);

/// A path: mostly `/` and up to five components of `COMPONENTS`, sometimes relative,
/// sometimes any string.
pub fn path(u: &mut Unstructured<'_>) -> Result<String> {
    match u.int_in_range(0u8..=15)? {
        0 => String::arbitrary(u),
        n => {
            let depth = u.int_in_range(0usize..=5)?;
            let mut p = String::new();
            for i in 0..depth {
                if i > 0 || n != 1 {
                    p.push('/');
                }
                p.push_str(u.choose(&COMPONENTS)?);
            }
            if p.is_empty() && n != 1 {
                p.push('/');
            }
            Ok(p)
        }
    }
}

/// An optional path (a listing's continuation, a rename's source).
pub fn opt_path(u: &mut Unstructured<'_>) -> Result<Option<String>> {
    if bool::arbitrary(u)? {
        path(u).map(Some)
    } else {
        Ok(None)
    }
}

/// An extended attribute name: mostly one of a few valid ones, sometimes any string.
pub fn xattr_name(u: &mut Unstructured<'_>) -> Result<String> {
    const NAMES: [&str; 5] = ["user.a", "user.b", "trusted.t", "security.selinux", ""];
    if u.ratio(1u8, 4u8)? {
        String::arbitrary(u)
    } else {
        u.choose(&NAMES).map(|s| s.to_string())
    }
}

/// Bulk bytes (a `Write`'s data).
pub fn bytes(u: &mut Unstructured<'_>) -> Result<Bytes> {
    Vec::<u8>::arbitrary(u).map(Bytes::from)
}
