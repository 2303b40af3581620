#pragma once
// Attention as one fused host program (FlashAttention's tiling on the CPU): the scores of a block of
// queries against a block of keys, the mask, an online softmax (one exp per score) and the product
// with V stay in cache; the backward recomputes the probabilities from the forward's log-sum-exp rows.
#include <optional>

#include "metagrad/tensor.hpp"

namespace metagrad {

// softmax(q k^T / sqrt(E) + mask) v as Tensor::scaled_dot_product_attention defines it, fused, where
// it applies: float32 q (..., L, E), k (..., S, E), v (..., S, Ev) of one batch shape on CLANG or LLVM,
// no dropout, a mask that needs no gradient, and env METAGRAD_FUSED_ATTENTION not 0. Else nothing,
// and the caller composes it from products and a softmax. `mask` is additive float or bool
// (true: attend), broadcast to the scores; `causal` masks j > i. The caller has checked the shapes.
std::optional<Tensor> fused_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const std::optional<Tensor>& mask, bool causal, double dropout_p);

}  // namespace metagrad
