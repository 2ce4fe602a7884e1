/* Compiled as C11 and as C++17 by ffi/tests/diopi_headers.rs: DIOPI 1.0's
   own macros and its declarations of the runtime functions it marks
   optional, of diopiGeneratorGetSeedAndOffset, of diopiCat/diopiStack and
   of functions_ext.h's functions,
   after include/diopi's headers in one translation unit. A declaration
   that differs from DIOPI's (a parameter's type, a const) is a conflicting
   redeclaration, and a macro defined otherwise a redefinition: both fail
   to compile under -Werror. */
#include "diopi/functions.h"
#include "diopi/functions_ext.h"

/* DIOPI's macros, as DIOPI defines them. */
#define DIOPI_ATTR_WEAK __attribute__((weak))
#define DIOPI_API DIOPI_ATTR_WEAK
#define DIOPI_RT_API

#ifdef __cplusplus
extern "C" {
#endif

extern DIOPI_API const char *diopiGetVersion(void);

extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorDevice(diopiConstTensorHandle_t th, diopiDevice_t *device);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorElemSize(diopiConstTensorHandle_t th, int64_t *itemsize);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorStoragePtr(diopiConstTensorHandle_t th, void **pStoragePtr);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorStorageOffset(diopiConstTensorHandle_t th, int64_t *pOffset);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorStorageNbytes(diopiConstTensorHandle_t th, size_t *pNbytes);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorDeviceIndex(diopiConstTensorHandle_t th,
                                                                          diopiDeviceIndex_t *pDevIndex);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorCrowIndices(diopiConstTensorHandle_t th,
                                                                          diopiConstTensorHandle_t *crow_indices);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorColIndices(diopiConstTensorHandle_t th,
                                                                         diopiConstTensorHandle_t *col_indices);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorValues(diopiConstTensorHandle_t th,
                                                                     diopiConstTensorHandle_t *values);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiIsTensorSparse(diopiConstTensorHandle_t th, bool *is_sparse);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetCurrentDeviceIndex(diopiDeviceIndex_t *pDevIndex);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiRequireBuffer(diopiContextHandle_t ctx, diopiTensorHandle_t *tensor,
                                                                   int64_t num_bytes, diopiDevice_t device);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGeneratorGetState(diopiContextHandle_t ctx,
                                                                       diopiConstGeneratorHandle_t th,
                                                                       diopiTensorHandle_t *data);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGeneratorSetState(diopiGeneratorHandle_t th,
                                                                       diopiConstTensorHandle_t state);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGeneratorGetSeedAndOffset(diopiGeneratorHandle_t th, uint64_t *ptrSeed,
                                                                               uint64_t *ptrOffset);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGeneratorSetSeedAndOffset(diopiGeneratorHandle_t th, uint64_t seed,
                                                                               uint64_t offset);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiRecordStart(const char *record_name, void **record);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiRecordEnd(void **record);

DIOPI_API diopiError_t diopiCat(diopiContextHandle_t ctx, diopiTensorHandle_t out, diopiConstTensorHandle_t *tensors,
                                int64_t num_inputs, int64_t dim);
DIOPI_API diopiError_t diopiStack(diopiContextHandle_t ctx, diopiTensorHandle_t out, diopiConstTensorHandle_t *tensors,
                                  int64_t numTensors, int64_t dim);

/* functions_ext.h */
DIOPI_API diopiError_t diopiRotaryEmbedding(diopiContextHandle_t ctx, diopiTensorHandle_t out, diopiConstTensorHandle_t x,
                                            diopiConstTensorHandle_t cos, diopiConstTensorHandle_t sin, const bool conj,
                                            const bool interleaved);
DIOPI_API diopiError_t diopiRMSNorm(diopiContextHandle_t ctx, diopiTensorHandle_t out, diopiTensorHandle_t inv_rms,
                                    diopiConstTensorHandle_t input, diopiSize_t normalized_shape,
                                    diopiConstTensorHandle_t weight, diopiConstTensorHandle_t bias, double eps);
DIOPI_API diopiError_t diopiRMSNormBackward(diopiContextHandle_t ctx, diopiTensorHandle_t grad_input,
                                            diopiTensorHandle_t grad_weight, diopiTensorHandle_t grad_bias,
                                            diopiConstTensorHandle_t grad_output, diopiConstTensorHandle_t input,
                                            diopiConstTensorHandle_t weight, diopiConstTensorHandle_t bias,
                                            diopiConstTensorHandle_t inv_rms, diopiSize_t normalized_shape, double eps);
DIOPI_API diopiError_t diopiScaledMaskedSoftmax(diopiContextHandle_t ctx, diopiTensorHandle_t output,
                                                diopiConstTensorHandle_t input, diopiConstTensorHandle_t mask, double scale,
                                                bool fixed_triu_mask);
DIOPI_API diopiError_t diopiScaledMaskedSoftmaxBackward(diopiContextHandle_t ctx, diopiTensorHandle_t grad_input,
                                                        diopiConstTensorHandle_t grad_output,
                                                        diopiConstTensorHandle_t output, diopiConstTensorHandle_t mask,
                                                        double scale, bool fixed_triu_mask);
DIOPI_API diopiError_t diopiFlashAttention(diopiContextHandle_t ctx, diopiTensorHandle_t attention_out,
                                           diopiTensorHandle_t softmax_lse, diopiGeneratorHandle_t gen,
                                           diopiConstTensorHandle_t q, diopiConstTensorHandle_t k,
                                           diopiConstTensorHandle_t v, diopiConstTensorHandle_t alibi_slopes,
                                           float p_dropout, float softmax_scale, bool is_causal,
                                           int32_t window_size_left, int32_t window_size_right);
DIOPI_API diopiError_t diopiFlashAttentionBackward(diopiContextHandle_t ctx, diopiTensorHandle_t grad_q,
                                                   diopiTensorHandle_t grad_k, diopiTensorHandle_t grad_v,
                                                   diopiConstTensorHandle_t grad_output, diopiGeneratorHandle_t gen,
                                                   diopiConstTensorHandle_t q, diopiConstTensorHandle_t k,
                                                   diopiConstTensorHandle_t v, diopiConstTensorHandle_t alibi_slopes,
                                                   diopiConstTensorHandle_t attention_out,
                                                   diopiConstTensorHandle_t softmax_lse, float p_dropout,
                                                   float softmax_scale, bool is_causal, int32_t window_size_left,
                                                   int32_t window_size_right);
DIOPI_API diopiError_t diopiFlashAttentionVarLen(diopiContextHandle_t ctx, diopiTensorHandle_t attention_out,
                                                 diopiTensorHandle_t softmax_lse, diopiGeneratorHandle_t gen,
                                                 diopiConstTensorHandle_t q, diopiConstTensorHandle_t k,
                                                 diopiConstTensorHandle_t v, diopiConstTensorHandle_t cum_seq_q,
                                                 diopiConstTensorHandle_t cum_seq_kv,
                                                 diopiConstTensorHandle_t alibi_slopes, int32_t max_seqlen_q,
                                                 int32_t max_seqlen_kv, float p_dropout, float softmax_scale,
                                                 bool is_causal, int32_t window_size_left, int32_t window_size_right);
DIOPI_API diopiError_t diopiFlashAttentionVarLenBackward(
    diopiContextHandle_t ctx, diopiTensorHandle_t grad_q, diopiTensorHandle_t grad_k, diopiTensorHandle_t grad_v,
    diopiConstTensorHandle_t grad_output, diopiGeneratorHandle_t gen, diopiConstTensorHandle_t q,
    diopiConstTensorHandle_t k, diopiConstTensorHandle_t v, diopiConstTensorHandle_t cum_seq_q,
    diopiConstTensorHandle_t cum_seq_kv, diopiConstTensorHandle_t alibi_slopes, diopiConstTensorHandle_t attention_out,
    diopiConstTensorHandle_t softmax_lse, int32_t max_seqlen_q, int32_t max_seqlen_kv, float p_dropout,
    float softmax_scale, bool is_causal, int32_t window_size_left, int32_t window_size_right);

#ifdef __cplusplus
}
#endif
