/* Threads doing I/O under the preload library: each writes its own file in pieces with
 * write, reads it back with pread, and all append to one shared file (O_APPEND). */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 8
#define PIECES 40
#define PIECE 1000

static const char *dir;

static void *work(void *arg) {
    int t = (int)(long)arg;
    char path[512], buf[PIECE], back[PIECE];
    snprintf(path, sizeof path, "%s/t%d", dir, t);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { perror("open"); exit(1); }
    for (int k = 0; k < PIECES; k++) {
        memset(buf, 'a' + (t + k) % 26, PIECE);
        if (write(fd, buf, PIECE) != PIECE) { perror("write"); exit(1); }
    }
    for (int k = 0; k < PIECES; k++) {
        if (pread(fd, back, PIECE, (off_t)k * PIECE) != PIECE) { perror("pread"); exit(1); }
        for (int i = 0; i < PIECE; i++)
            if (back[i] != 'a' + (t + k) % 26) { fprintf(stderr, "thread %d: bad byte\n", t); exit(1); }
    }
    if (close(fd) != 0) { perror("close"); exit(1); }
    snprintf(path, sizeof path, "%s/log", dir);
    int lfd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (lfd < 0) { perror("open log"); exit(1); }
    char line[64];
    int n = snprintf(line, sizeof line, "thread %d done\n", t);
    if (write(lfd, line, n) != n) { perror("append"); exit(1); }
    close(lfd);
    return NULL;
}

int main(int argc, char **argv) {
    dir = argv[1];
    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, work, (void *)t);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    printf("THREADS-OK\n");
    return 0;
}
