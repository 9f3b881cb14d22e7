// make_layer_cache: picks the lego for a spec. A window at least as long as the whole sequence
// needs no rotation, so it gets a contiguous cache (attention still applies the window).
#include <string>

#include "kv/factory.h"

namespace mlxb {

std::unique_ptr<LayerCache> make_layer_cache(const CacheSpec& spec) {
  auto bad = [](const std::string& f, int64_t v) {
    fail(ErrorCode::kInvalidArgument, "cache spec: " + f + " must be positive, got " + std::to_string(v), f);
  };
  if (spec.kv_heads <= 0) bad("kv_heads", spec.kv_heads);
  if (spec.head_dim <= 0) bad("head_dim", spec.head_dim);
  if (spec.max_tokens <= 0) bad("max_tokens", spec.max_tokens);
  if (spec.window < 0) bad("window", spec.window);
  if (spec.window > 0 && spec.window < spec.max_tokens) return kv::make_rotating_cache(spec);
  return kv::make_contiguous_cache(spec);
}

}  // namespace mlxb
