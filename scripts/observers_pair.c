/* dipu_malloc + dipu_free from C, observers off, against the same library
 * built with the observer test compiled out (dipu-runtime's feature
 * `observers-compiled-out`): both libraries are opened in this process
 * (each with its own runtime), and short blocks of pairs alternate
 * between them, their order swapped every round, so that the load of a
 * shared machine drifts alike for both. Prints each one's median ns per
 * pair and the median and quartiles of the per-round ratios observed /
 * compiled out. Run by scripts/bench-observers.sh.
 * Usage: observers_pair OBSERVED.so COMPILED_OUT.so [ROUNDS [N [SIZE]]] */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dipu_runtime.h"

typedef struct {
  dipu_status (*malloc_)(size_t, dipu_stream, void **);
  dipu_status (*free_)(void *);
  dipu_stream stream;
} lib_t;

static int open_lib(const char *path, lib_t *lib) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  dipu_status (*from_pool)(int32_t, int32_t, dipu_stream *);
  *(void **)&lib->malloc_ = dlsym(h, "dipu_malloc");
  *(void **)&lib->free_ = dlsym(h, "dipu_free");
  *(void **)&from_pool = dlsym(h, "dipu_stream_from_pool");
  if (!lib->malloc_ || !lib->free_ || !from_pool) {
    fprintf(stderr, "%s: missing symbols\n", path);
    return 1;
  }
  if (from_pool(0, 0, &lib->stream) != DIPU_OK) {
    fprintf(stderr, "%s: dipu_stream_from_pool failed\n", path);
    return 1;
  }
  return 0;
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Nanoseconds per pair of `n` pairs of `size` bytes. */
static double block(const lib_t *lib, long n, size_t size) {
  void *p;
  double t0 = now_ns();
  for (long i = 0; i < n; i++) {
    if (lib->malloc_(size, lib->stream, &p) != DIPU_OK || lib->free_(p) != DIPU_OK) {
      fprintf(stderr, "a pair failed\n");
      exit(1);
    }
  }
  return (now_ns() - t0) / (double)n;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s OBSERVED.so COMPILED_OUT.so [ROUNDS [N [SIZE]]]\n", argv[0]);
    return 2;
  }
  long rounds = argc > 3 ? atol(argv[3]) : 201;
  long n = argc > 4 ? atol(argv[4]) : 20000;
  size_t size = argc > 5 ? (size_t)atol(argv[5]) : 4096;
  lib_t a, b;
  if (open_lib(argv[1], &a) || open_lib(argv[2], &b)) {
    return 1;
  }
  double *ta = malloc(sizeof(double) * rounds), *tb = malloc(sizeof(double) * rounds),
         *r = malloc(sizeof(double) * rounds);
  for (long i = -4; i < rounds; i++) { /* 4 rounds of warm-up */
    double x, y;
    if (i % 2 == 0) {
      x = block(&a, n, size);
      y = block(&b, n, size);
    } else {
      y = block(&b, n, size);
      x = block(&a, n, size);
    }
    if (i >= 0) {
      ta[i] = x;
      tb[i] = y;
      r[i] = x / y;
    }
  }
  qsort(ta, rounds, sizeof(double), cmp);
  qsort(tb, rounds, sizeof(double), cmp);
  qsort(r, rounds, sizeof(double), cmp);
  printf("dipu_malloc+dipu_free %zu B from C: observers off %.2f ns, compiled out %.2f ns "
         "per pair (medians of %ld rounds of %ld); ratio median %.3f (quartiles %.3f..%.3f)\n",
         size, ta[rounds / 2], tb[rounds / 2], rounds, n, r[rounds / 2], r[rounds / 4],
         r[3 * rounds / 4]);
  return 0;
}
