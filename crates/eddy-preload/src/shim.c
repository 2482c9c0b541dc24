/* The C side of libeddy_preload.so: what Rust cannot define.
 *
 * - The variadic entry points (open, open64, openat, openat64, fcntl, fcntl64): each reads its
 *   optional argument with va_arg and calls the Rust implementation. The exported symbols are
 *   Rust naked trampolines that jump here (a cdylib exports only Rust symbols).
 * - stdio streams over Eddy descriptors: glibc's fopen does not call the exported open, so
 *   fopen/fopen64/fdopen open (or take) an Eddy descriptor and wrap it with fopencookie; the
 *   cookie functions call read/write/lseek64/close, which this library serves.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

extern int eddy_pl_openat(int dirfd, const char *path, int flags, unsigned mode, int which);
extern int eddy_pl_fcntl(int fd, int cmd, unsigned long arg, int which);
/* -2: not an Eddy path (use the real function); -1: failed, errno set; else our descriptor. */
extern int eddy_pl_open_for_stream(const char *path, int flags, unsigned mode);
extern int eddy_pl_is_ours(int fd);

static int wants_mode(int flags) {
    return (flags & O_CREAT) != 0 || (flags & __O_TMPFILE) == __O_TMPFILE;
}

#define OPEN_SHIM(name, which)                                                   \
    int eddy_shim_##name(const char *path, int flags, ...) {                     \
        unsigned mode = 0;                                                       \
        if (wants_mode(flags)) {                                                 \
            va_list ap;                                                          \
            va_start(ap, flags);                                                 \
            mode = va_arg(ap, unsigned);                                         \
            va_end(ap);                                                          \
        }                                                                        \
        return eddy_pl_openat(AT_FDCWD, path, flags, mode, which);               \
    }
OPEN_SHIM(open, 0)
OPEN_SHIM(open64, 1)

#define OPENAT_SHIM(name, which)                                                 \
    int eddy_shim_##name(int dirfd, const char *path, int flags, ...) {          \
        unsigned mode = 0;                                                       \
        if (wants_mode(flags)) {                                                 \
            va_list ap;                                                          \
            va_start(ap, flags);                                                 \
            mode = va_arg(ap, unsigned);                                         \
            va_end(ap);                                                          \
        }                                                                        \
        return eddy_pl_openat(dirfd, path, flags, mode, which);                  \
    }
OPENAT_SHIM(openat, 2)
OPENAT_SHIM(openat64, 3)

#define FCNTL_SHIM(name, which)                                                  \
    int eddy_shim_##name(int fd, int cmd, ...) {                                 \
        va_list ap;                                                              \
        va_start(ap, cmd);                                                       \
        /* Every fcntl argument is an int or a pointer: read as glibc does. */   \
        unsigned long arg = (unsigned long)va_arg(ap, void *);                   \
        va_end(ap);                                                              \
        return eddy_pl_fcntl(fd, cmd, arg, which);                               \
    }
FCNTL_SHIM(fcntl, 0)
FCNTL_SHIM(fcntl64, 1)

/* ------------------------------------------------------------------ stdio */

static ssize_t ck_read(void *c, char *buf, size_t n) {
    ssize_t r = read((int)(intptr_t)c, buf, n);
    return r < 0 ? -1 : r;
}
static ssize_t ck_write(void *c, const char *buf, size_t n) {
    ssize_t r = write((int)(intptr_t)c, buf, n);
    /* fopencookie: 0 is an error for a write function. */
    return r <= 0 ? 0 : r;
}
static int ck_seek(void *c, off64_t *off, int whence) {
    off64_t r = lseek64((int)(intptr_t)c, *off, whence);
    if (r < 0) return -1;
    *off = r;
    return 0;
}
static int ck_close(void *c) { return close((int)(intptr_t)c); }

static const cookie_io_functions_t EDDY_COOKIE = {ck_read, ck_write, ck_seek, ck_close};

/* fopen mode string -> open flags; -1 (EINVAL) when malformed. */
static int mode_flags(const char *mode) {
    int flags;
    switch (mode[0]) {
    case 'r': flags = O_RDONLY; break;
    case 'w': flags = O_WRONLY | O_CREAT | O_TRUNC; break;
    case 'a': flags = O_WRONLY | O_CREAT | O_APPEND; break;
    default: errno = EINVAL; return -1;
    }
    for (const char *p = mode + 1; *p && *p != ','; p++) {
        switch (*p) {
        case '+': flags = (flags & ~O_ACCMODE) | O_RDWR; break;
        case 'x': flags |= O_EXCL; break;
        case 'e': flags |= O_CLOEXEC; break;
        default: break; /* 'b', 'm', 'c': no meaning here */
        }
    }
    return flags;
}

/* A cookie stream over descriptor `fd`; fileno() gives `fd`. */
static FILE *cookie_stream(int fd, const char *mode) {
    FILE *f = fopencookie((void *)(intptr_t)fd, mode, EDDY_COOKIE);
    if (f) f->_fileno = fd;
    return f;
}

static FILE *wrap(int fd, const char *mode) {
    FILE *f = cookie_stream(fd, mode);
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

typedef FILE *(*fopen_fn)(const char *, const char *);
typedef FILE *(*fdopen_fn)(int, const char *);

#define FOPEN_SHIM(name)                                                         \
    FILE *eddy_shim_##name(const char *path, const char *mode) {                 \
        static fopen_fn real;                                                    \
        int flags = path && mode ? mode_flags(mode) : -1;                        \
        int fd = flags < 0 ? -2 : eddy_pl_open_for_stream(path, flags, 0666);    \
        if (fd == -2) {                                                          \
            if (!real) real = (fopen_fn)dlsym(RTLD_NEXT, #name);                 \
            if (!real) { errno = ENOSYS; return NULL; }                          \
            return real(path, mode);                                             \
        }                                                                        \
        if (fd < 0) return NULL;                                                 \
        return wrap(fd, mode);                                                   \
    }
FOPEN_SHIM(fopen)
FOPEN_SHIM(fopen64)

FILE *eddy_shim_fdopen(int fd, const char *mode) {
    static fdopen_fn real;
    if (eddy_pl_is_ours(fd)) {
        if (!mode || mode_flags(mode) < 0) { errno = EINVAL; return NULL; }
        /* fdopen does not close on failure: wrap without closing. */
        return cookie_stream(fd, mode);
    }
    if (!real) real = (fdopen_fn)dlsym(RTLD_NEXT, "fdopen");
    if (!real) { errno = ENOSYS; return NULL; }
    return real(fd, mode);
}

/* stdin, stdout or stderr (fd 0, 1 or 2) now names an Eddy file: glibc's own streams write
 * with its internal write, which this library cannot see, so the stream becomes a cookie
 * stream over the descriptor (whose calls go through this library, to Eddy or not). */
void eddy_shim_std_stream(int fd) {
    static FILE *made[3];
    if (fd < 0 || fd > 2) return;
    FILE **slot = fd == 0 ? &stdin : fd == 1 ? &stdout : &stderr;
    if (made[fd] && *slot == made[fd]) return;
    FILE *f = cookie_stream(fd, fd == 0 ? "r" : "w");
    if (!f) return;
    if (fd == 2) setvbuf(f, NULL, _IONBF, 0);
    made[fd] = f;
    *slot = f;
}

/* Before fd 0, 1 or 2 is replaced: what its stream buffered goes to the old file. */
void eddy_shim_flush_std(int fd) {
    if (fd == 1 && stdout) fflush(stdout);
    if (fd == 2 && stderr) fflush(stderr);
}
