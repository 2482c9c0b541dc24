/* The libc calls libeddy_preload.so covers, one after the other on an Eddy directory (argv[1]);
 * each result is checked here, and the files left behind are checked by the test through the
 * client library. Prints CALLS-OK at the end; any failure names the call and exits 1. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(cond, what)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "FAILED: %s (line %d, errno %d: %s)\n", what, __LINE__,    \
                    errno, strerror(errno));                                           \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

/* dir/name, in one of four buffers used in turn (a call may take two such paths). */
static const char *at(const char *dir, const char *name) {
    static char bufs[4][PATH_MAX];
    static int next;
    char *p = bufs[next++ % 4];
    snprintf(p, PATH_MAX, "%s/%s", dir, name);
    return p;
}

int main(int argc, char **argv) {
    const char *d = argv[1];
    char buf[4096];
    struct stat st;

    /* stdio: fopen/fprintf/fwrite/fflush/fclose, fread, fileno, fdopen */
    FILE *f = fopen(at(d, "stdio.txt"), "w");
    CHECK(f, "fopen w");
    CHECK(fprintf(f, "hello %d\n", 42) == 9, "fprintf");
    CHECK(fwrite("abc", 1, 3, f) == 3, "fwrite");
    CHECK(fflush(f) == 0, "fflush");
    CHECK(fstat(fileno(f), &st) == 0 && st.st_size == 12, "fstat(fileno) after fflush");
    CHECK(fclose(f) == 0, "fclose");
    f = fopen(at(d, "stdio.txt"), "a+");
    CHECK(f, "fopen a+");
    fputs("tail\n", f);
    CHECK(fclose(f) == 0, "fclose a+");
    f = fopen(at(d, "stdio.txt"), "r");
    CHECK(f, "fopen r");
    size_t n = fread(buf, 1, sizeof buf, f);
    CHECK(n == 17 && memcmp(buf, "hello 42\nabctail\n", 17) == 0, "fread");
    CHECK(fseek(f, 6, SEEK_SET) == 0 && fgetc(f) == '4', "fseek/fgetc");
    fclose(f);
    errno = 0;
    CHECK(fopen(at(d, "stdio.txt"), "wx") == NULL && errno == EEXIST, "fopen wx on existing");
    int fd = open(at(d, "stdio.txt"), O_RDONLY);
    CHECK(fd >= 0, "open for fdopen");
    f = fdopen(fd, "r");
    CHECK(f && fgets(buf, sizeof buf, f) && strcmp(buf, "hello 42\n") == 0, "fdopen/fgets");
    fclose(f);

    /* writev/readv/pwritev/preadv, lseek SEEK_END/SEEK_DATA/SEEK_HOLE */
    fd = open(at(d, "vec.bin"), O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0, "open vec");
    struct iovec iov[2] = {{"0123", 4}, {"456789", 6}};
    CHECK(writev(fd, iov, 2) == 10, "writev");
    CHECK(lseek(fd, 0, SEEK_CUR) == 10, "offset after writev");
    struct iovec piov[1] = {{"AB", 2}};
    CHECK(pwritev(fd, piov, 1, 2) == 2, "pwritev");
    CHECK(lseek(fd, 0, SEEK_CUR) == 10, "pwritev leaves the offset");
    char a[3] = {0}, b[8] = {0};
    struct iovec riov[2] = {{a, 3}, {b, 7}};
    CHECK(preadv(fd, riov, 2, 0) == 10 && memcmp(a, "01A", 3) == 0 && memcmp(b, "B456789", 7) == 0, "preadv");
    CHECK(lseek(fd, -3, SEEK_END) == 7, "SEEK_END");
    CHECK(read(fd, buf, 10) == 3 && memcmp(buf, "789", 3) == 0, "read at SEEK_END-3");
    CHECK(read(fd, buf, 10) == 0, "read at EOF");
    CHECK(lseek(fd, 1, SEEK_DATA) == 1 && lseek(fd, 1, SEEK_HOLE) == 10, "SEEK_DATA/SEEK_HOLE");
    errno = 0;
    CHECK(lseek(fd, 10, SEEK_DATA) == -1 && errno == ENXIO, "SEEK_DATA at EOF");
    CHECK(lseek(fd, 0, SEEK_SET) == 0, "SEEK_SET");
    CHECK(readv(fd, riov, 2) == 10, "readv");
    CHECK(fsync(fd) == 0 && fdatasync(fd) == 0, "fsync/fdatasync");

    /* ftruncate/truncate, posix_fallocate grows, fallocate reserves (holes refused), mmap a copy (writable shared refused) */
    CHECK(ftruncate(fd, 4) == 0 && fstat(fd, &st) == 0 && st.st_size == 4, "ftruncate");
    CHECK(posix_fallocate(fd, 0, 100) == 0 && fstat(fd, &st) == 0 && st.st_size == 100, "posix_fallocate");
    CHECK(truncate(at(d, "vec.bin"), 6) == 0 && stat(at(d, "vec.bin"), &st) == 0 && st.st_size == 6, "truncate");
    errno = 0;
    CHECK(fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 10) == 0 && fstat(fd, &st) == 0 && st.st_size == 6, "fallocate keep size");
    CHECK(fallocate(fd, 0, 0, 200) == 0 && fstat(fd, &st) == 0 && st.st_size == 200, "fallocate grows");
    CHECK(ftruncate(fd, 6) == 0, "ftruncate back");
    errno = 0;
    CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 10) == -1 && errno == EOPNOTSUPP, "punch hole refused");
    errno = 0;
    CHECK(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED && errno == ENODEV, "writable shared mmap refused");
    {
        char *m = mmap(NULL, 8192, PROT_READ, MAP_PRIVATE, fd, 0);
        CHECK(m != MAP_FAILED && m[0] == '0' && m[2] == 'A' && m[5] == 0 && m[8191] == 0, "private mmap: the bytes, then zeros");
        CHECK(munmap(m, 8192) == 0, "munmap");
        errno = 0;
        CHECK(mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 1) == MAP_FAILED && errno == EINVAL, "unaligned mmap offset");
    }
    /* A write behind the library's back (a raw system call) fails, never lands silently. */
    CHECK(syscall(SYS_write, fd, "x", 1) == -1 && errno == EPERM, "raw write refused");
    CHECK(syscall(SYS_read, fd, buf, 1) == -1 && errno == EBADF, "raw read refused");

    /* fcntl: flags, O_APPEND by F_SETFL, descriptor flags, F_DUPFD_CLOEXEC, dup/dup2/dup3 */
    CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR, "F_GETFL");
    CHECK(fcntl(fd, F_SETFL, O_APPEND) == 0 && (fcntl(fd, F_GETFL) & O_APPEND), "F_SETFL O_APPEND");
    CHECK(lseek(fd, 0, SEEK_SET) == 0 && write(fd, "Z", 1) == 1, "append write");
    CHECK(fstat(fd, &st) == 0 && st.st_size == 7, "append went to the end");
    CHECK(lseek(fd, 0, SEEK_CUR) == 7, "offset after append");
    CHECK(fcntl(fd, F_SETFD, FD_CLOEXEC) == 0 && fcntl(fd, F_GETFD) == FD_CLOEXEC, "F_SETFD");
    int fd2 = fcntl(fd, F_DUPFD_CLOEXEC, 50);
    CHECK(fd2 >= 50, "F_DUPFD_CLOEXEC");
    CHECK(lseek(fd2, 1, SEEK_SET) == 1 && lseek(fd, 0, SEEK_CUR) == 1, "dup shares the offset");
    int fd3 = dup(fd);
    CHECK(fd3 >= 0 && read(fd3, buf, 2) == 2 && memcmp(buf, "1A", 2) == 0, "dup read");
    CHECK(dup3(fd, 60, O_CLOEXEC) == 60 && fstat(60, &st) == 0 && st.st_size == 7, "dup3");
    CHECK(close(fd2) == 0 && close(fd3) == 0 && close(60) == 0, "close dups");
    CHECK(fstat(fd, &st) == 0, "original still open after closing dups");
    errno = 0;
    CHECK(fstat(fd3, &st) == -1 && errno == EBADF, "closed descriptor is gone");

    /* Record locks through the client: a child sees the parent's lock. */
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 5};
    CHECK(fcntl(fd, F_SETLK, &fl) == 0, "F_SETLK");
    pid_t pid = fork();
    if (pid == 0) {
        int cfd = open(at(d, "vec.bin"), O_RDWR);
        struct flock t = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 2, .l_len = 1};
        if (cfd < 0 || fcntl(cfd, F_GETLK, &t) != 0 || t.l_type != F_WRLCK || t.l_start != 0 || t.l_len != 5)
            _exit(2);
        t.l_type = F_WRLCK;
        errno = 0;
        if (fcntl(cfd, F_SETLK, &t) != -1 || (errno != EAGAIN && errno != EACCES)) _exit(3);
        _exit(0);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0, "child saw the lock");
    fl.l_type = F_UNLCK;
    CHECK(fcntl(fd, F_SETLK, &fl) == 0, "F_UNLCK");
    CHECK(close(fd) == 0, "close");

    /* Directories: mkdirat/openat relative to a directory descriptor, getdents64,
     * opendir/readdir/telldir/seekdir/rewinddir, fdopendir, dirfd, fstatat AT_EMPTY_PATH,
     * statx, fchdir/getcwd */
    CHECK(mkdir(at(d, "dir"), 0755) == 0, "mkdir");
    int dfd = open(at(d, "dir"), O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0, "open O_DIRECTORY");
    CHECK(mkdirat(dfd, "sub", 0700) == 0, "mkdirat");
    for (int i = 0; i < 5; i++) {
        char name[16];
        snprintf(name, sizeof name, "f%d", i);
        int x = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL, 0644);
        CHECK(x >= 0 && write(x, name, 2) == 2 && close(x) == 0, "openat create");
    }
    CHECK(fstatat(dfd, "f3", &st, 0) == 0 && st.st_size == 2 && S_ISREG(st.st_mode), "fstatat");
    CHECK(fstatat(dfd, "", &st, AT_EMPTY_PATH) == 0 && S_ISDIR(st.st_mode), "fstatat AT_EMPTY_PATH");
    struct statx sx;
    CHECK(statx(dfd, "sub", 0, STATX_BASIC_STATS, &sx) == 0 && S_ISDIR(sx.stx_mode) && (sx.stx_mode & 07777) == 0700, "statx");
    long total = 0, entries = 0;
    for (;;) {
        long got = getdents64(dfd, buf, sizeof buf);
        CHECK(got >= 0, "getdents64");
        if (got == 0) break;
        for (long off = 0; off < got;) {
            unsigned short reclen = *(unsigned short *)(buf + off + 16);
            entries++;
            off += reclen;
        }
        total += got;
    }
    CHECK(entries == 8, "getdents64 lists . .. sub f0..f4");
    DIR *dir = opendir(at(d, "dir"));
    CHECK(dir, "opendir");
    int names = 0;
    long mark = -1;
    struct dirent *e;
    while ((e = readdir(dir))) {
        names++;
        if (strcmp(e->d_name, "f2") == 0) {
            CHECK(e->d_type == DT_REG, "d_type");
            mark = telldir(dir);
        }
    }
    CHECK(names == 8 && mark > 0, "readdir");
    seekdir(dir, mark);
    e = readdir(dir);
    CHECK(e && strcmp(e->d_name, "f3") == 0, "seekdir");
    rewinddir(dir);
    e = readdir(dir);
    CHECK(e && strcmp(e->d_name, ".") == 0, "rewinddir");
    CHECK(fstat(dirfd(dir), &st) == 0 && S_ISDIR(st.st_mode), "dirfd");
    CHECK(closedir(dir) == 0, "closedir");
    int dfd2 = open(at(d, "dir"), O_RDONLY | O_DIRECTORY);
    dir = fdopendir(dfd2);
    CHECK(dir && readdir(dir), "fdopendir");
    closedir(dir);
    char cwd[PATH_MAX];
    CHECK(getcwd(cwd, sizeof cwd), "getcwd");
    CHECK(fchdir(dfd) == 0, "fchdir");
    CHECK(getcwd(buf, sizeof buf) && strcmp(buf, at(d, "dir")) == 0, "getcwd under the prefix");
    CHECK(access("f1", R_OK | W_OK) == 0, "access relative");
    CHECK(chdir(cwd) == 0 && getcwd(buf, sizeof buf) && strcmp(buf, cwd) == 0, "chdir back out");

    /* rename family, links, unlinkat */
    CHECK(renameat(dfd, "f0", dfd, "g0") == 0, "renameat");
    errno = 0;
    CHECK(renameat2(dfd, "f1", dfd, "g0", RENAME_NOREPLACE) == -1 && errno == EEXIST, "RENAME_NOREPLACE");
    CHECK(rename(at(d, "dir/f1"), at(d, "dir/g1")) == 0, "rename");
    errno = 0;
    CHECK(rename(at(d, "dir/g1"), "/tmp/eddy-preload-outside") == -1 && errno == EXDEV, "rename across the prefix");
    CHECK(symlinkat("g1", dfd, "ln") == 0, "symlinkat");
    ssize_t k = readlinkat(dfd, "ln", buf, sizeof buf);
    CHECK(k == 2 && memcmp(buf, "g1", 2) == 0, "readlinkat");
    CHECK(lstat(at(d, "dir/ln"), &st) == 0 && S_ISLNK(st.st_mode), "lstat symlink");
    CHECK(stat(at(d, "dir/ln"), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 2, "stat follows");
    CHECK(link(at(d, "dir/g1"), at(d, "dir/hard")) == 0 && stat(at(d, "dir/hard"), &st) == 0 && st.st_nlink == 2, "link");
    CHECK(unlinkat(dfd, "f4", 0) == 0, "unlinkat");
    errno = 0;
    CHECK(unlinkat(dfd, "sub", 0) == -1 && errno == EISDIR, "unlinkat of a directory");
    CHECK(unlinkat(dfd, "sub", AT_REMOVEDIR) == 0, "unlinkat AT_REMOVEDIR");
    errno = 0;
    CHECK(rmdir(at(d, "dir")) == -1 && errno == ENOTEMPTY, "rmdir not empty");
    close(dfd);

    /* attributes */
    CHECK(chmod(at(d, "dir/g1"), 0640) == 0 && stat(at(d, "dir/g1"), &st) == 0 && (st.st_mode & 07777) == 0640, "chmod");
    fd = open(at(d, "dir/g1"), O_RDONLY);
    CHECK(fchmod(fd, 0604) == 0 && fstat(fd, &st) == 0 && (st.st_mode & 07777) == 0604, "fchmod");
    CHECK(fchown(fd, 1234, 5678) == 0 && fstat(fd, &st) == 0 && st.st_uid == 1234 && st.st_gid == 5678, "fchown");
    CHECK(chown(at(d, "dir/g1"), 0, 0) == 0 && stat(at(d, "dir/g1"), &st) == 0 && st.st_uid == 0, "chown");
    struct timespec ts[2] = {{1000000000, 5}, {1100000000, 7}};
    CHECK(futimens(fd, ts) == 0 && fstat(fd, &st) == 0 && st.st_mtim.tv_sec == 1100000000 && st.st_mtim.tv_nsec == 7, "futimens");
    struct timespec omit[2] = {{0, UTIME_OMIT}, {1200000000, 0}};
    CHECK(utimensat(AT_FDCWD, at(d, "dir/g1"), omit, 0) == 0 && stat(at(d, "dir/g1"), &st) == 0 && st.st_mtim.tv_sec == 1200000000 && st.st_atim.tv_sec == 1000000000, "utimensat");
    close(fd);

    /* statfs/statvfs */
    struct statfs sf;
    struct statvfs sv;
    CHECK(statfs(d, &sf) == 0 && sf.f_blocks > 0 && sf.f_bsize > 0, "statfs");
    CHECK(statvfs(d, &sv) == 0 && sv.f_blocks > 0 && sv.f_namemax > 0, "statvfs");

    /* unsupported: a clear errno */
    errno = 0;
    CHECK(open(d, O_TMPFILE | O_RDWR, 0600) == -1 && errno == EOPNOTSUPP, "O_TMPFILE refused");
    errno = 0;
    CHECK(open(at(d, "none/x"), O_RDONLY) == -1 && errno == ENOENT, "ENOENT");
    errno = 0;
    CHECK(open(at(d, "stdio.txt/x"), O_RDONLY) == -1 && errno == ENOTDIR, "ENOTDIR");
    errno = 0;
    CHECK(open(at(d, "dir"), O_WRONLY) == -1 && errno == EISDIR, "EISDIR");
    errno = 0;
    CHECK(open(at(d, "dir/ln"), O_RDONLY | O_NOFOLLOW) == -1 && errno == ELOOP, "O_NOFOLLOW");

    /* stdout redirected onto an Eddy file: printf goes there. */
    fflush(stdout);
    int saved = dup(1);
    int out = open(at(d, "stdout.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(out >= 0 && dup2(out, 1) == 1 && close(out) == 0, "dup2 onto stdout");
    printf("printed %s\n", "through stdio");
    fflush(stdout);
    CHECK(dup2(saved, 1) == 1 && close(saved) == 0, "stdout back");
    printf("CALLS-OK\n");
    return 0;
}
