/* The memory checker from C: leaks two device blocks from two named
 * functions, and a third block a thread cache handed out again, and frees
 * a fourth; with -DBAD_FREES it also frees that third
 * block twice and frees a pointer never allocated, and expects
 * DIPU_STATUS_INVALID_ARGUMENT for both. Run with DIPU_MEM_CHECK=1
 * DIPU_MEM_CHECK_ENABLE_BACKTRACE=1: the report written at exit lists the
 * two leaks, each with its function in the backtrace. Build with
 * -g -O0 -rdynamic so the frames resolve. */
#include <stdint.h>
#include <stdio.h>

#include "check.h"

void *leak_from_alpha(dipu_stream stream);
void *leak_from_beta(dipu_stream stream);
void *leak_from_gamma(dipu_stream stream);
void free_one_block(dipu_stream stream);

__attribute__((noinline)) void *leak_from_alpha(dipu_stream stream) {
  void *p = NULL;
  CHECK(dipu_malloc(1 << 20, stream, &p));
  return p;
}

__attribute__((noinline)) void *leak_from_beta(dipu_stream stream) {
  void *p = NULL;
  CHECK(dipu_malloc(4096, stream, &p));
  return p;
}

/* Allocates, frees and allocates the same size again: the block comes
 * back from the thread's cache, and its leak is reported all the same. */
__attribute__((noinline)) void *leak_from_gamma(dipu_stream stream) {
  void *p = NULL, *q = NULL;
  CHECK(dipu_malloc(2048, stream, &p));
  CHECK(dipu_free(p));
  CHECK(dipu_malloc(2048, stream, &q));
  EXPECT(q == p);
  return q;
}

__attribute__((noinline)) void free_one_block(dipu_stream stream) {
  void *p = NULL;
  CHECK(dipu_malloc(777, stream, &p));
  CHECK(dipu_free(p));
#ifdef BAD_FREES
  EXPECT(dipu_free(p) == DIPU_STATUS_INVALID_ARGUMENT);
  printf("second free: %s\n", dipu_last_error_message());
  EXPECT(dipu_free((void *)(uintptr_t)0x1000) == DIPU_STATUS_INVALID_ARGUMENT);
  printf("unknown free: %s\n", dipu_last_error_message());
#endif
}

int main(void) {
  dipu_stream stream;
  CHECK(dipu_stream_from_pool(0, 0, &stream));
  EXPECT(leak_from_alpha(stream) != NULL);
  EXPECT(leak_from_beta(stream) != NULL);
  EXPECT(leak_from_gamma(stream) != NULL);
  free_one_block(stream);
  printf("leaks done\n");
  return 0;
}
