/* A framework that provides only DIOPI's required runtime functions (the
 * ones declared without DIOPI_ATTR_WEAK) and none of the optional ones,
 * exported from the executable (-rdynamic):
 *   diopi_weak_framework LIB loads     LIB loads and sees no optional function
 *   diopi_weak_framework LIB refused   dlopen refuses LIB, naming an optional one */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "diopi/diopirt.h"

diopiError_t diopiGetTensorData(diopiTensorHandle_t th, void **p) {
  (void)th, (void)p;
  return diopiErrorOccurred;
}
diopiError_t diopiGetTensorDataConst(diopiConstTensorHandle_t th, const void **p) {
  (void)th, (void)p;
  return diopiErrorOccurred;
}
diopiError_t diopiGetTensorShape(diopiConstTensorHandle_t th, diopiSize_t *size) {
  (void)th, (void)size;
  return diopiErrorOccurred;
}
diopiError_t diopiGetTensorStride(diopiConstTensorHandle_t th, diopiSize_t *stride) {
  (void)th, (void)stride;
  return diopiErrorOccurred;
}
diopiError_t diopiGetTensorDtype(diopiConstTensorHandle_t th, diopiDtype_t *dtype) {
  (void)th, (void)dtype;
  return diopiErrorOccurred;
}
diopiError_t diopiGetTensorNumel(diopiConstTensorHandle_t th, int64_t *numel) {
  (void)th, (void)numel;
  return diopiErrorOccurred;
}
diopiError_t diopiGetStream(diopiContextHandle_t ctx, diopiStreamHandle_t *stream) {
  (void)ctx, (void)stream;
  return diopiErrorOccurred;
}
diopiError_t diopiRequireTensor(diopiContextHandle_t ctx, diopiTensorHandle_t *tensor, const diopiSize_t *size,
                                const diopiSize_t *stride, const diopiDtype_t dtype, const diopiDevice_t device) {
  (void)ctx, (void)tensor, (void)size, (void)stride, (void)dtype, (void)device;
  return diopiErrorOccurred;
}

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  if (dlsym(RTLD_DEFAULT, "diopiGetTensorDevice") != NULL || dlsym(RTLD_DEFAULT, "diopiGetStream") == NULL) {
    fprintf(stderr, "the process must export the required functions and none of the optional ones\n");
    return 1;
  }
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (strcmp(argv[2], "refused") == 0) {
    if (lib != NULL) {
      fprintf(stderr, "%s loaded although it needs optional functions this framework lacks\n", argv[1]);
      return 1;
    }
    const char *why = dlerror();
    if (strstr(why, "undefined symbol: diopi") == NULL) {
      fprintf(stderr, "refused for another reason: %s\n", why);
      return 1;
    }
    printf("refused: %s\n", why);
    return 0;
  }
  if (lib == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  uint32_t (*present)(void) = (uint32_t (*)(void))dlsym(lib, "diopi_weak_probe_present");
  const char *(*name)(int) = (const char *(*)(int))dlsym(lib, "diopi_weak_probe_name");
  int (*count)(void) = (int (*)(void))dlsym(lib, "diopi_weak_probe_count");
  if (!present || !name || !count) return 1;
  uint32_t mask = present();
  for (int i = 0; i < count(); ++i)
    if (mask & (UINT32_C(1) << i)) fprintf(stderr, "%s is not NULL in a framework without it\n", name(i));
  if (mask != 0) return 1;
  printf("ok: %d optional functions, all NULL\n", count());
  return 0;
}
