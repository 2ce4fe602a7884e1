/*
 * functions_ext.h: DIOPI's fused functions for large language models that
 * dipu-rs's kernel libraries provide, with DIOPI's names and signatures.
 *
 * dipu-rs's own declarations, written from the facts of DIOPI's
 * functions_ext.h. The conventions of functions.h hold: the context first,
 * then the outputs, the inputs and the attributes (flash attention takes
 * its generator before q, k and v); an optional tensor is NULL when
 * absent; every function is DIOPI_API, so a library may lack it.
 */
#ifndef DIPU_DIOPI_FUNCTIONS_EXT_H
#define DIPU_DIOPI_FUNCTIONS_EXT_H

#include "diopirt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rotary position embedding of x's last dimension (even length D) into out
   (which may be x). cos and sin have last dimension D/2 and broadcast
   against x[..., :D/2]. interleaved = false rotates the pairs
   (x[i], x[i + D/2]), true the pairs (x[2i], x[2i+1]); conj = true rotates
   by the opposite angle, which is the backward applied to a gradient. */
DIOPI_API diopiError_t diopiRotaryEmbedding(diopiContextHandle_t ctx, diopiTensorHandle_t out, diopiConstTensorHandle_t x, diopiConstTensorHandle_t cos, diopiConstTensorHandle_t sin, const bool conj, const bool interleaved);

/* RMS normalisation over the trailing normalized_shape dimensions:
   inv_rms = 1 / sqrt(mean(input^2) + eps) per row (float32 for a half
   input), out = input * inv_rms * weight + bias; weight and bias may be
   NULL. */
DIOPI_API diopiError_t diopiRMSNorm(diopiContextHandle_t ctx, diopiTensorHandle_t out, diopiTensorHandle_t inv_rms, diopiConstTensorHandle_t input, diopiSize_t normalized_shape, diopiConstTensorHandle_t weight, diopiConstTensorHandle_t bias, double eps);

/* Gradients of diopiRMSNorm from the saved inv_rms; grad_weight and
   grad_bias may be NULL (not computed); eps is unused. */
DIOPI_API diopiError_t diopiRMSNormBackward(diopiContextHandle_t ctx, diopiTensorHandle_t grad_input, diopiTensorHandle_t grad_weight, diopiTensorHandle_t grad_bias, diopiConstTensorHandle_t grad_output, diopiConstTensorHandle_t input, diopiConstTensorHandle_t weight, diopiConstTensorHandle_t bias, diopiConstTensorHandle_t inv_rms, diopiSize_t normalized_shape, double eps);

/* Softmax over the last dimension of input * scale, where positions the
   boolean mask marks true score -10000. fixed_triu_mask = true ignores
   mask and hides the columns above the diagonal of the last two
   dimensions (causal). */
DIOPI_API diopiError_t diopiScaledMaskedSoftmax(diopiContextHandle_t ctx, diopiTensorHandle_t output, diopiConstTensorHandle_t input, diopiConstTensorHandle_t mask, double scale, bool fixed_triu_mask);

/* Gradient of diopiScaledMaskedSoftmax from its output: scale * output *
   (grad_output - sum(grad_output * output)), zero where hidden. */
DIOPI_API diopiError_t diopiScaledMaskedSoftmaxBackward(diopiContextHandle_t ctx, diopiTensorHandle_t grad_input, diopiConstTensorHandle_t grad_output, diopiConstTensorHandle_t output, diopiConstTensorHandle_t mask, double scale, bool fixed_triu_mask);

/* Flash attention. q is [batch, seq_q, heads_q, dim], k and v
   [batch, seq_k, heads_k, dim] with heads_q a multiple of heads_k (query
   head h reads key/value head h / (heads_q / heads_k)); attention_out is
   shaped like q, softmax_lse (float32, [batch, heads_q, seq_q]) the
   logsumexp of each row of scaled scores. softmax_scale is explicit;
   is_causal hides key j > i + seq_k - seq_q; window sizes of -1 leave that
   side unbounded; alibi_slopes (float32 [heads_q] or [batch, heads_q]) may
   be NULL; p_dropout is the drop probability, drawn from gen (NULL only
   when p_dropout is 0), and the backward repeats the forward's mask from
   the same generator. */
DIOPI_API diopiError_t diopiFlashAttention(diopiContextHandle_t ctx, diopiTensorHandle_t attention_out, diopiTensorHandle_t softmax_lse, diopiGeneratorHandle_t gen, diopiConstTensorHandle_t q, diopiConstTensorHandle_t k, diopiConstTensorHandle_t v, diopiConstTensorHandle_t alibi_slopes, float p_dropout, float softmax_scale, bool is_causal, int32_t window_size_left, int32_t window_size_right);
DIOPI_API diopiError_t diopiFlashAttentionBackward(diopiContextHandle_t ctx, diopiTensorHandle_t grad_q, diopiTensorHandle_t grad_k, diopiTensorHandle_t grad_v, diopiConstTensorHandle_t grad_output, diopiGeneratorHandle_t gen, diopiConstTensorHandle_t q, diopiConstTensorHandle_t k, diopiConstTensorHandle_t v, diopiConstTensorHandle_t alibi_slopes, diopiConstTensorHandle_t attention_out, diopiConstTensorHandle_t softmax_lse, float p_dropout, float softmax_scale, bool is_causal, int32_t window_size_left, int32_t window_size_right);

/* Flash attention of packed sequences: q is [total_q, heads_q, dim], k and
   v [total_k, heads_k, dim]; cum_seq_q and cum_seq_kv (int32, [batch + 1])
   hold the sequences' start offsets and the total; max_seqlen_* bound the
   lengths; softmax_lse is [batch, heads_q, max_seqlen_q]. */
DIOPI_API diopiError_t diopiFlashAttentionVarLen(diopiContextHandle_t ctx, diopiTensorHandle_t attention_out, diopiTensorHandle_t softmax_lse, diopiGeneratorHandle_t gen, diopiConstTensorHandle_t q, diopiConstTensorHandle_t k, diopiConstTensorHandle_t v, diopiConstTensorHandle_t cum_seq_q, diopiConstTensorHandle_t cum_seq_kv, diopiConstTensorHandle_t alibi_slopes, int32_t max_seqlen_q, int32_t max_seqlen_kv, float p_dropout, float softmax_scale, bool is_causal, int32_t window_size_left, int32_t window_size_right);
DIOPI_API diopiError_t diopiFlashAttentionVarLenBackward(diopiContextHandle_t ctx, diopiTensorHandle_t grad_q, diopiTensorHandle_t grad_k, diopiTensorHandle_t grad_v, diopiConstTensorHandle_t grad_output, diopiGeneratorHandle_t gen, diopiConstTensorHandle_t q, diopiConstTensorHandle_t k, diopiConstTensorHandle_t v, diopiConstTensorHandle_t cum_seq_q, diopiConstTensorHandle_t cum_seq_kv, diopiConstTensorHandle_t alibi_slopes, diopiConstTensorHandle_t attention_out, diopiConstTensorHandle_t softmax_lse, int32_t max_seqlen_q, int32_t max_seqlen_kv, float p_dropout, float softmax_scale, bool is_causal, int32_t window_size_left, int32_t window_size_right);

#ifdef __cplusplus
}
#endif

#endif /* DIPU_DIOPI_FUNCTIONS_EXT_H */
