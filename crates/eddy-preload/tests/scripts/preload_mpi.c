#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size; MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *dir = argv[1];
    char path[512], buf[4096];
    const int BLK = 100000;
    char *blk = malloc(BLK);
    for (int i = 0; i < BLK; i++) blk[i] = (char)('a' + (rank * 7 + i) % 26);
    /* POSIX: one shared file at rank offsets, one file per rank */
    snprintf(path, sizeof path, "%s/shared", dir);
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    if (fd < 0) { perror("open shared"); MPI_Abort(MPI_COMM_WORLD, 1); }
    if (pwrite(fd, blk, BLK, (off_t)rank * BLK) != BLK) { perror("pwrite"); MPI_Abort(MPI_COMM_WORLD, 1); }
    if (close(fd) != 0) { perror("close"); MPI_Abort(MPI_COMM_WORLD, 1); }
    snprintf(path, sizeof path, "%s/rank%d", dir, rank);
    FILE *f = fopen(path, "w");
    if (!f) { perror("fopen"); MPI_Abort(MPI_COMM_WORLD, 1); }
    fprintf(f, "rank %d of %d\n", rank, size);
    if (fclose(f) != 0) { perror("fclose"); MPI_Abort(MPI_COMM_WORLD, 1); }
    MPI_Barrier(MPI_COMM_WORLD);
    /* MPI-IO */
    MPI_File fh;
    snprintf(path, sizeof path, "%s/mpiio", dir);
    int rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    if (rc != MPI_SUCCESS) { char s[256]; int l; MPI_Error_string(rc, s, &l); fprintf(stderr, "MPI_File_open: %s\n", s); MPI_Abort(MPI_COMM_WORLD, 1); }
    MPI_Status st;
    rc = MPI_File_write_at(fh, (MPI_Offset)rank * BLK, blk, BLK, MPI_CHAR, &st);
    if (rc != MPI_SUCCESS) { fprintf(stderr, "write_at failed\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    MPI_File_sync(fh);
    MPI_Barrier(MPI_COMM_WORLD);
    int other = (rank + 1) % size;
    char *back = malloc(BLK);
    rc = MPI_File_read_at(fh, (MPI_Offset)other * BLK, back, BLK, MPI_CHAR, &st);
    if (rc != MPI_SUCCESS) { fprintf(stderr, "read_at failed\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    for (int i = 0; i < BLK; i++) if (back[i] != (char)('a' + (other * 7 + i) % 26)) { fprintf(stderr, "rank %d: mismatch at %d\n", rank, i); MPI_Abort(MPI_COMM_WORLD, 1); }
    MPI_File_close(&fh);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("MPI-OK %d\n", size);
    MPI_Finalize();
    return 0;
}
