/*
 * dipu_diopi.h: dipu-rs's side of the DIOPI contract.
 *
 * A diopiTensorHandle_t given to a kernel library through dipu-rs points at
 * a `struct diopiTensor` laid out as below: a framework fills one (on its
 * stack, for one call: the fast path) or gets one from
 * dipu_diopi_tensor_create (dipu_runtime.h). The runtime's diopirt
 * functions read it; a descriptor whose magic is not
 * DIPU_DIOPI_TENSOR_MAGIC is refused with diopiErrorOccurred.
 *
 * The first nine fields and their meaning are fixed (the layout is checked
 * by a test: 56 bytes on 64-bit targets); dipu-rs may only append fields.
 * The C functions that open a kernel library, make contexts and tensor
 * descriptors and launch host functions on a stream are in dipu_runtime.h,
 * included here. docs/diopi.md describes the contract.
 */
#ifndef DIPU_DIOPI_H
#define DIPU_DIOPI_H

#include <stddef.h>
#include <stdint.h>

#include "diopirt.h"
#include "../dipu_runtime.h"

/* The `magic` of every valid descriptor: the bytes "DIPT" (little-endian). */
#define DIPU_DIOPI_TENSOR_MAGIC 0x54504944u

/* The `device` of a descriptor of host memory. */
#define DIPU_DIOPI_HOST_DEVICE (-1)

/* A tensor descriptor as dipu-rs reads it (see the top of this file). */
struct diopiTensor {
    /* DIPU_DIOPI_TENSOR_MAGIC; anything else is rejected. */
    uint32_t magic;
    /* A diopiDtype_t value. */
    int32_t dtype;
    /* DIPU_DIOPI_HOST_DEVICE (-1): host memory; >= 0: that dipu device. */
    int32_t device;
    /* Number of dimensions; 0 for a 0-dim tensor (numel 1). */
    int32_t ndim;
    /* Base of the storage (NULL only with storage_nbytes 0). */
    void *storage;
    /* Element 0 is storage_offset elements after `storage`. */
    int64_t storage_offset;
    /* Bytes of the whole storage. */
    size_t storage_nbytes;
    /* ndim sizes (NULL when ndim is 0). */
    const int64_t *shape;
    /* ndim strides, in elements (NULL when ndim is 0). */
    const int64_t *strides;
};

#endif /* DIPU_DIOPI_H */
