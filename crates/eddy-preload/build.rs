//! Compiles the C shim: the variadic entry points (open, openat, fcntl) Rust cannot define,
//! and the stdio streams (fopen/fdopen over fopencookie).
fn main() {
    println!("cargo:rerun-if-changed=src/shim.c");
    cc::Build::new()
        .file("src/shim.c")
        .flag_if_supported("-fvisibility=default")
        .warnings(true)
        .compile("eddy_preload_shim");
}
