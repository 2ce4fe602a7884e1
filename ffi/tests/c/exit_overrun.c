/* An overrun the program never checks for, found at process exit. Run with
 * DIPU_MEM_CHECK=1 and DIPU_MEM_CHECK_GUARD_BYTES=N (N >= 8). On the host
 * vendor device memory is host memory, so a plain store plays the buggy
 * kernel: it writes 2 bytes just past the end of an allocation, which is
 * then freed; the program ends without any check or shutdown, by
 *   ./exit_overrun           return from main (1000 bytes: a kept block)
 *   ./exit_overrun exit      exit(0)          (1000 bytes)
 *   ./exit_overrun big       return from main (8 MiB: a block not kept)
 * and the checker's report at exit names the overrun. */
#include <stdio.h>
#include <string.h>

#include "check.h"

static void *overrun_and_free(dipu_stream stream, size_t bytes) {
  void *p = NULL;
  CHECK(dipu_malloc(bytes, stream, &p));
  /* The guards are filled on the stream: let that run first. */
  CHECK(dipu_stream_synchronize(stream));
  ((volatile unsigned char *)p)[bytes] = 0xAB;
  ((volatile unsigned char *)p)[bytes + 1] = 0xAB;
  CHECK(dipu_free(p));
  return p;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "return";
  dipu_stream stream;
  CHECK(dipu_stream_from_pool(0, 0, &stream));
  size_t bytes = strcmp(mode, "big") == 0 ? (size_t)8 << 20 : 1000;
  void *p = overrun_and_free(stream, bytes);
  printf("overran and freed %p (%zu bytes)\n", p, bytes);
  fflush(stdout);
  if (strcmp(mode, "exit") == 0) {
    exit(0);
  }
  return 0;
}
