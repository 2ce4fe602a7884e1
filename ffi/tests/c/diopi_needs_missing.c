/* A kernel library needing a runtime function that no runtime provides:
   dipu_diopi_open must refuse it, naming the symbol. */
#include "diopi/diopirt.h"

extern diopiError_t diopiNoSuchRuntimeFunction(diopiContextHandle_t ctx);

diopiError_t diopiZeroInp(diopiContextHandle_t ctx, diopiTensorHandle_t t);
diopiError_t diopiZeroInp(diopiContextHandle_t ctx, diopiTensorHandle_t t) {
    (void)t;
    return diopiNoSuchRuntimeFunction(ctx);
}
