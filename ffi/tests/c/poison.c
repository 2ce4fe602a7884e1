/* The memory checker's poisoned, quarantined frees from C. Run with
 * DIPU_MEM_CHECK=1 and DIPU_MEM_CHECK_POISON=1. On the host vendor device
 * memory is host memory, so plain loads and stores play the stale kernel:
 * after the free (and its poison fill on the stream) the block reads as
 * 0xdd bytes, and one byte stored at offset 100 is a write after free that
 * dipu_memcheck_check_all reports once (1, then 0). */
#include <stdio.h>

#include "check.h"

static void free_the_block(void *p) { CHECK(dipu_free(p)); }

int main(void) {
  dipu_stream stream;
  CHECK(dipu_stream_from_pool(0, 0, &stream));
  void *p = NULL;
  CHECK(dipu_malloc(4096, stream, &p));
  CHECK(dipu_memset_async(p, 0x11, 4096, stream));
  free_the_block(p);
  /* The poison is filled on the stream: let that run first. */
  CHECK(dipu_stream_synchronize(stream));
  const volatile unsigned char *read = p;
  for (int i = 0; i < 4096; i++) EXPECT(read[i] == 0xdd);
  printf("read after free: %02x %02x %02x %02x\n", read[0], read[1], read[2],
         read[3]);
  ((volatile unsigned char *)p)[100] = 0xAB;
  size_t found = 99;
  CHECK(dipu_memcheck_check_all(&found));
  EXPECT(found == 1);
  CHECK(dipu_memcheck_check_all(&found));
  EXPECT(found == 0);
  printf("poison done\n");
  return 0;
}
