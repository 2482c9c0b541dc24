//! The shared library's soname: `libeddy.so.1`, the major version of the C interface
//! (`EDDY_API_VERSION`), so that a program linked against it refuses an incompatible one.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libeddy.so.1");
}
