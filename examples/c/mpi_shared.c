/* libeddy with MPI: every rank connects to the deployment of EDDY_STATE, writes its own
 * block of one shared file, reads it back and checks it; after a barrier, rank 0 reads the
 * whole file and checks every rank's block. Exits non-zero on any error or mismatch.
 *
 *   mpicc mpi_shared.c $(pkg-config --cflags --libs eddy) -o mpi_shared
 *   EDDY_STATE=/path/to/state mpirun -np 4 -x EDDY_STATE ./mpi_shared /dir/in/the/namespace
 */
#include <eddy.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK (256 * 1024 + 17) /* not a multiple of the chunk size: blocks share chunks */

static int rank;

static void die(const char *what, long long rc) {
  fprintf(stderr, "rank %d: %s failed (%lld): %s\n", rank, what, rc, eddy_last_error());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static void fill(unsigned char *buf, int r) {
  for (size_t i = 0; i < BLOCK; i++) buf[i] = (unsigned char)('a' + (r * 7 + i) % 26);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *dir = argc > 1 ? argv[1] : "/";
  char path[1024];
  snprintf(path, sizeof path, "%s/shared.bin", dir);

  eddy_conn_t conn;
  long long rc = eddy_connect(NULL, &conn);
  if (rc < 0) die("eddy_connect", rc);
  eddy_file_t f;
  if ((rc = eddy_open(conn, path, O_RDWR | O_CREAT, 0644, &f)) < 0) die("eddy_open", rc);

  unsigned char *mine = malloc(BLOCK), *got = malloc(BLOCK);
  if (!mine || !got) die("malloc", 0);
  fill(mine, rank);
  unsigned long long at = (unsigned long long)rank * BLOCK;
  if ((rc = eddy_pwrite(f, mine, BLOCK, at)) != BLOCK) die("eddy_pwrite", rc);
  if ((rc = eddy_fsync(f)) < 0) die("eddy_fsync", rc);
  if ((rc = eddy_pread(f, got, BLOCK, at)) != BLOCK) die("eddy_pread", rc);
  if (memcmp(mine, got, BLOCK) != 0) {
    fprintf(stderr, "rank %d: its block reads back differently\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if ((rc = eddy_close(f)) < 0) die("eddy_close", rc);
  MPI_Barrier(MPI_COMM_WORLD);

  if (rank == 0) {
    size_t total = (size_t)size * BLOCK;
    unsigned char *all = malloc(total);
    if (!all) die("malloc", 0);
    if ((rc = eddy_open(conn, path, O_RDONLY, 0, &f)) < 0) die("eddy_open", rc);
    struct eddy_stat st;
    if ((rc = eddy_fstat(f, &st)) < 0) die("eddy_fstat", rc);
    if (st.size != total) {
      fprintf(stderr, "rank 0: %s has %llu bytes, not %zu\n", path,
              (unsigned long long)st.size, total);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if ((rc = eddy_pread(f, all, total, 0)) != (long long)total) die("eddy_pread", rc);
    for (int r = 0; r < size; r++) {
      fill(mine, r);
      if (memcmp(mine, all + (size_t)r * BLOCK, BLOCK) != 0) {
        fprintf(stderr, "rank 0: the block of rank %d differs\n", r);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
    if ((rc = eddy_close(f)) < 0) die("eddy_close", rc);
    free(all);
    printf("MPI-OK %d %zu\n", size, total);
  }
  eddy_disconnect(conn);
  free(mine);
  free(got);
  MPI_Finalize();
  return 0;
}
