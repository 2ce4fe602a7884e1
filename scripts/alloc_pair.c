/* N dipu_malloc + dipu_free pairs of SIZE bytes on a pooled stream of
 * device 0 (cache hits after the first): the C ABI's allocation path, for
 * instruction counts under callgrind (docs/benchmarks.md, "The C ABI's
 * pair"). Build and run:
 *   cc -O2 -Iinclude scripts/alloc_pair.c -Ltarget/release -ldipu_runtime -o /tmp/alloc_pair
 *   LD_LIBRARY_PATH=target/release valgrind --tool=callgrind /tmp/alloc_pair 40000 4096
 * Usage: alloc_pair [N [SIZE]] (default 1000 pairs of 4096 bytes). */
#include <stdio.h>
#include <stdlib.h>

#include "dipu_runtime.h"

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000;
  size_t size = argc > 2 ? (size_t)atol(argv[2]) : 4096;
  dipu_stream s;
  void *p;
  if (dipu_stream_from_pool(0, 0, &s) != DIPU_OK) {
    fprintf(stderr, "dipu_stream_from_pool: %s\n", dipu_last_error_message());
    return 1;
  }
  for (long i = 0; i < n; i++) {
    if (dipu_malloc(size, s, &p) != DIPU_OK || dipu_free(p) != DIPU_OK) {
      fprintf(stderr, "pair %ld: %s\n", i, dipu_last_error_message());
      return 1;
    }
  }
  printf("%ld pairs of %zu bytes\n", n, size);
  return 0;
}
