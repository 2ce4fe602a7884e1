/*
 * Shared libraries that are not good vendors, one per -D flag, for the
 * loader's error tests:
 *   -DNO_ENTRY      exports neither entry point
 *   -DABI_MISMATCH  exports an ABI version the runtime does not speak
 *   -DINIT_FAILS    dipu_vendor_create fails with a message
 */
#include "dipu_vendor.h"

#include <stdio.h>

#if defined(NO_ENTRY)
int some_unrelated_function(void) { return 42; }
#elif defined(ABI_MISMATCH)
uint32_t dipu_vendor_abi_version(void) { return DIPU_VENDOR_ABI_MAJOR + 98; }
const DipuVendorVTable *dipu_vendor_create(DipuVendorError *err) {
  (void)err;
  return NULL;
}
#elif defined(INIT_FAILS)
uint32_t dipu_vendor_abi_version(void) { return DIPU_VENDOR_ABI_MAJOR; }
const DipuVendorVTable *dipu_vendor_create(DipuVendorError *err) {
  err->kind = DIPU_ERROR_KIND_VENDOR_ERROR;
  err->has_vendor_code = 1;
  err->vendor_code = 100;
  snprintf(err->message, sizeof err->message, "simulated driver refuses to start: licence server unreachable");
  return NULL;
}
#else
#error "define NO_ENTRY, ABI_MISMATCH or INIT_FAILS"
#endif
