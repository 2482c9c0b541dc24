/* libeddy's first example: connect to the deployment named by EDDY_STATE, write a file,
 * read it back and check it, byte for byte; then the same through one batch of
 * asynchronous operations over two files. Exits non-zero on any error or mismatch.
 *
 *   cc hello.c $(pkg-config --cflags --libs eddy) -o hello
 *   EDDY_STATE=/path/to/state ./hello /dir/in/the/namespace
 */
#include <eddy.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIZE (1 << 20)

static int fail(const char *what, long long rc) {
  fprintf(stderr, "hello: %s failed (%lld): %s\n", what, rc, eddy_last_error());
  return 1;
}

static void fill(unsigned char *buf, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)((i * 31 + seed) % 251);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "/";
  char path[1024], path2[1024];
  snprintf(path, sizeof path, "%s/hello.bin", dir);
  snprintf(path2, sizeof path2, "%s/hello-batch.bin", dir);

  eddy_conn_t conn;
  int rc = eddy_connect(NULL, &conn); /* NULL: the deployment of EDDY_STATE */
  if (rc < 0) return fail("eddy_connect", rc);

  unsigned char *want = malloc(SIZE), *got = malloc(SIZE);
  if (!want || !got) return 1;
  fill(want, SIZE, 7);

  /* One file, call by call. */
  eddy_file_t f;
  if ((rc = eddy_open(conn, path, O_RDWR | O_CREAT | O_TRUNC, 0644, &f)) < 0)
    return fail("eddy_open", rc);
  long long n = eddy_pwrite(f, want, SIZE, 0);
  if (n != SIZE) return fail("eddy_pwrite", n);
  if ((rc = eddy_fsync(f)) < 0) return fail("eddy_fsync", rc);
  memset(got, 0, SIZE);
  n = eddy_pread(f, got, SIZE, 0);
  if (n != SIZE) return fail("eddy_pread", n);
  if (memcmp(want, got, SIZE) != 0) {
    fprintf(stderr, "hello: %s: what was read differs from what was written\n", path);
    return 1;
  }
  struct eddy_stat st;
  if ((rc = eddy_fstat(f, &st)) < 0) return fail("eddy_fstat", rc);
  if (st.size != SIZE) {
    fprintf(stderr, "hello: %s has %llu bytes, not %d\n", path, (unsigned long long)st.size, SIZE);
    return 1;
  }
  if ((rc = eddy_close(f)) < 0) return fail("eddy_close", rc);

  /* A batch over two files: two half writes to the second file, a truncate of the first
   * to half its size (after the writes: a truncate waits for what is before it), a sync,
   * then reads of both. */
  eddy_file_t g;
  if ((rc = eddy_open(conn, path, O_RDWR, 0, &f)) < 0) return fail("eddy_open", rc);
  if ((rc = eddy_open(conn, path2, O_RDWR | O_CREAT | O_TRUNC, 0644, &g)) < 0)
    return fail("eddy_open", rc);
  unsigned char *back = malloc(SIZE);
  if (!back) return 1;
  memset(got, 0, SIZE);
  memset(back, 0, SIZE);
  struct eddy_op ops[6] = {
      {.kind = EDDY_OP_WRITE, .file = g, .offset = 0, .buf = want, .len = SIZE / 2},
      {.kind = EDDY_OP_WRITE, .file = g, .offset = SIZE / 2, .buf = want + SIZE / 2, .len = SIZE / 2},
      {.kind = EDDY_OP_TRUNCATE, .file = f, .offset = SIZE / 2},
      {.kind = EDDY_OP_SYNC, .file = g},
      {.kind = EDDY_OP_READ, .file = g, .offset = 0, .buf = got, .len = SIZE},
      {.kind = EDDY_OP_READ, .file = f, .offset = 0, .buf = back, .len = SIZE},
  };
  eddy_batch_t b;
  if ((rc = eddy_batch_submit(conn, ops, 6, &b)) < 0) return fail("eddy_batch_submit", rc);
  if ((rc = eddy_batch_wait(b, 60000)) < 0) return fail("eddy_batch_wait", rc);
  if ((rc = eddy_batch_free(b)) < 0) return fail("eddy_batch_free", rc);
  const long long expect[6] = {SIZE / 2, SIZE / 2, 0, 0, SIZE, SIZE / 2};
  for (int i = 0; i < 6; i++) {
    if (ops[i].result != expect[i]) {
      fprintf(stderr, "hello: batch operation %d gave %lld, not %lld\n", i,
              (long long)ops[i].result, expect[i]);
      return 1;
    }
  }
  if (memcmp(want, got, SIZE) != 0 || memcmp(want, back, SIZE / 2) != 0) {
    fprintf(stderr, "hello: the batch read back something else than was written\n");
    return 1;
  }
  if ((rc = eddy_close(f)) < 0 || (rc = eddy_close(g)) < 0) return fail("eddy_close", rc);
  if ((rc = eddy_disconnect(conn)) < 0) return fail("eddy_disconnect", rc);
  free(want);
  free(got);
  free(back);
  printf("HELLO-OK %s %s\n", path, path2);
  return 0;
}
