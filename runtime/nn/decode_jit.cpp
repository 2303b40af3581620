// nn::DecodeJit: one TinyJit per tokens' shape and span of the cache, the position an argument.
#include "metagrad/nn/decode_jit.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "metagrad/detail/cat.hpp"
#include "metagrad/device.hpp"
#include "metagrad/nn.hpp"

namespace metagrad::nn {

DecodeJit::DecodeJit(Step step, std::int64_t max_len) : step_(std::move(step)), max_len_(max_len) {
  if (max_len < 1)
    throw std::invalid_argument(
        detail::cat("DecodeJit: max_len ", std::to_string(max_len), " must be positive"));
}

Tensor DecodeJit::operator()(const Tensor& tokens, std::int64_t pos) {
  if (tokens.ndim() != 2 || tokens.shape()[1] < 1 || pos < 0 || pos + tokens.shape()[1] > max_len_)
    throw std::invalid_argument(detail::cat("DecodeJit: tokens ", to_string(tokens.shape()),
                                            " must be (N, L) at positions [", std::to_string(pos),
                                            ", pos + L) within ", std::to_string(max_len_)));
  std::int64_t l = tokens.shape()[1], end = pos + l;
  std::int64_t span = KVCache::span(end, max_len_);
  Tensor start(std::vector<std::int64_t>{pos}, {1}, {.device = tokens.device(), .dtype = dtypes::int64});
  if (!Device::get(tokens.device()).compiled()) return step_(tokens, start, span);
  auto& jit = jits_[{tokens.shape()[0], l, span}];
  if (!jit)
    jit = std::make_unique<Jit>([this, span](const Tensor& t, const Tensor& p) { return step_(t, p, span); });
  if (jit->captured()) ++replays_;
  return (*jit)(tokens, start);
}

}  // namespace metagrad::nn
