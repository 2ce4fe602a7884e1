/* The memory checker's guard bytes from C. Run with DIPU_MEM_CHECK=1 and
 * DIPU_MEM_CHECK_GUARD_BYTES=N (N >= 8). On the host vendor device memory
 * is host memory, so a plain store plays the buggy kernel: one byte past
 * the end of a live allocation. dipu_memcheck_check_all reports it once
 * (1, then 0), and the free does not report it again. With
 * DIPU_MEM_CHECK_ABORT=1 the first check aborts the process instead. */
#include <stdio.h>

#include "check.h"

int main(void) {
  dipu_stream stream;
  CHECK(dipu_stream_from_pool(0, 0, &stream));
  void *p = NULL;
  CHECK(dipu_malloc(1000, stream, &p));
  size_t found = 99;
  CHECK(dipu_memcheck_check_all(&found));
  EXPECT(found == 0);
  /* The guards are filled on the stream: let that run first. */
  CHECK(dipu_stream_synchronize(stream));
  ((volatile unsigned char *)p)[1000 + 2] = 0xAB;
  CHECK(dipu_memcheck_check_all(&found));
  EXPECT(found == 1);
  printf("checked once\n");
  fflush(stdout);
  CHECK(dipu_memcheck_check_all(NULL));
  CHECK(dipu_free(p));
  CHECK(dipu_memcheck_check_all(&found));
  EXPECT(found == 0);
  printf("guards done\n");
  return 0;
}
