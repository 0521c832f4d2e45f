/* Two arrays written in step, `distance` bytes apart: how long a pass takes.
 *
 * Each step stores a column index into one array and a value into the other, as a row-wise
 * SpGEMM stores a result row's coordinates and values, while reading and zeroing a 51.5 KB
 * dense row (MIT8's accumulator). On AMD's Zen cores some distances make every store miss
 * the L1 (its way predictor hashes address bits 12-27 in pairs); BENCHMARKS.md, "Arrays
 * written in step", has the numbers.
 *
 *   gcc -O2 -o /tmp/way_alias bench/way_alias.c
 *   /tmp/way_alias 0x8001000 0x8002000 0x10000000 0x10007000      # distances, in bytes
 *   /tmp/way_alias pairs                                           # every pair of bits 12-28
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define STEPS (1L << 22)   /* entries per pass: 32 MiB per array */
#define COLUMNS 6440       /* the dense row's length */

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The fastest of seven passes, in milliseconds, with the arrays `distance` bytes apart. */
static double pass_ms(long distance) {
  size_t span = (size_t)distance + STEPS * 8 + (4 << 20);
  char *base = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  /* 16 bytes past a 2 MiB boundary, where glibc's large blocks start. */
  char *start = (char *)(((uintptr_t)base + (2 << 20) - 1) & ~(uintptr_t)((2 << 20) - 1)) + 16;
  int64_t *crd = (int64_t *)start;
  double *vals = (double *)(start + distance);
  memset(crd, 0, STEPS * 8);
  memset(vals, 0, STEPS * 8);
  static double row[COLUMNS];
  for (int j = 0; j < COLUMNS; j++) row[j] = j;
  double best = 1e9;
  for (int round = 0; round < 7; round++) {
    double t = seconds();
    uint64_t x = 88172645463325252ull;
    long j = 0;
    for (long i = 0; i < STEPS; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      j += 1 + (long)(x & 3);
      if (j >= COLUMNS) j -= COLUMNS;
      crd[i] = j;
      vals[i] = row[j];
      row[j] = 0.5;
    }
    t = seconds() - t;
    if (t < best) best = t;
  }
  munmap(base, span);
  return best * 1e3;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "pairs") == 0) {
    printf("baseline (2 pages apart): %.2f ms\n", pass_ms(2 << 12));
    for (int a = 12; a <= 27; a++)
      for (int b = a + 1; b <= 28; b++)
        printf("bits %d,%d: %.2f ms\n", a, b, pass_ms((1L << a) + (1L << b)));
    return 0;
  }
  for (int k = 1; k < argc; k++) {
    long distance = strtol(argv[k], NULL, 0);
    printf("%#lx: %.2f ms\n", distance, pass_ms(distance));
  }
  return 0;
}
