//! libeddy_preload.so: unmodified dynamically-linked programs see an Eddy deployment under a
//! path prefix, with no FUSE:
//!
//! ```text
//! LD_PRELOAD=libeddy_preload.so EDDY_PREFIX=/eddy EDDY_STATE=/path/to/state cmd ...
//! ```
//!
//! The library defines the libc functions that take paths or descriptors. A path under the
//! prefix (or a descriptor opened through one) is served by an `eddy_client::Client` on a
//! runtime of the library's own, which the calling thread drives for the call (decision
//! 0052); everything else goes to the real function (found with `dlsym(RTLD_NEXT)`) after
//! one prefix comparison or one table look-up. See decision 0016.
//!
//! Every entry point is `enter`ed: a thread-local guard sends the library's own libc calls
//! (tokio, sockets, reading deployment.toml) to the real functions, errors become errno, and a
//! panic is caught and becomes EIO.

mod fds;
mod ops;
mod path;
mod real;
mod stat;
mod state;

use state::{enter, settings};

/// The exported names whose definitions are C (variadic, or stdio over fopencookie): a Rust
/// naked function of that name jumps to the C one, registers and stack untouched (a cdylib
/// exports only symbols Rust defines).
macro_rules! trampolines {
    ($($name:ident => $target:ident),* $(,)?) => {
        extern "C" { $(fn $target();)* }
        $(
            /// Jumps to the C shim of the same name.
            ///
            /// # Safety
            /// Called by C code with the libc signature of the same name.
            #[unsafe(naked)]
            #[no_mangle]
            pub unsafe extern "C" fn $name() {
                core::arch::naked_asm!("jmp {}", sym $target)
            }
        )*
    };
}

trampolines! {
    open => eddy_shim_open,
    open64 => eddy_shim_open64,
    openat => eddy_shim_openat,
    openat64 => eddy_shim_openat64,
    fcntl => eddy_shim_fcntl,
    fcntl64 => eddy_shim_fcntl64,
    fopen => eddy_shim_fopen,
    fopen64 => eddy_shim_fopen64,
    fdopen => eddy_shim_fdopen,
}

extern "C" fn init() {
    enter((), || {
        if settings().is_some() {
            // SAFETY: umask cannot fail; the mask is put back at once.
            let m = unsafe {
                let m = real::umask(0o022);
                real::umask(m);
                m
            };
            state::set_umask(m);
            ops::set_pid();
            state::register_fork_handlers();
            fds::adopt_inherited();
            for fd in 0..=2 {
                if fds::is_ours(fd) {
                    ops::std_stream(fd);
                }
            }
            ops::adopt_cwd();
        }
        Ok(())
    })
}

extern "C" fn fini() {
    // stdio streams over Eddy descriptors are flushed first (exit flushes them only after
    // the destructors ran), then the sizes written are published.
    // SAFETY: fflush(NULL) flushes every stream.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    ops::publish_all();
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = fini;
