/* libdipu_runtime.so opened RTLD_LOCAL (as Python opens extension
 * modules): dipu_diopi_open must still give the kernel library the
 * runtime's diopirt symbols. `diopi_dlopen RUNTIME_SO KERNEL_LIB`. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

typedef int (*open_fn)(const char *);
typedef int (*lookup_fn)(const char *, void **);

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  void *rt = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!rt) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  if (dlsym(RTLD_DEFAULT, "diopiGetTensorData") != NULL) {
    fprintf(stderr, "the runtime's symbols are global before dipu_diopi_open: the test proves nothing\n");
    return 1;
  }
  open_fn open = (open_fn)dlsym(rt, "dipu_diopi_open");
  lookup_fn lookup = (lookup_fn)dlsym(rt, "dipu_diopi_lookup");
  const char *(*last)(void) = (const char *(*)(void))dlsym(rt, "dipu_last_error_message");
  if (!open || !lookup || !last) return 1;
  if (open(argv[2]) != 0) {
    fprintf(stderr, "dipu_diopi_open: %s\n", last());
    return 1;
  }
  void *f = NULL;
  if (lookup("diopiAdd", &f) != 0 || !f) return 1;
  printf("ok\n");
  return 0;
}
