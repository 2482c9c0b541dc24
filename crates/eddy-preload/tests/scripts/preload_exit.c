/* Leaves data in a stdio buffer of an Eddy file and exits without closing it: exit(3)
 * flushes the buffer after the main thread's thread-locals are gone, so the library cannot
 * run the write on this thread and hands it to its runtime. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    FILE *f = fopen(argv[1], "w");
    if (!f) { perror("fopen"); return 1; }
    for (int i = 0; i < 1000; i++) fprintf(f, "line %d left in the buffer\n", i);
    exit(0);
}
