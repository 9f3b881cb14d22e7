// The one JS form of ModelConfig (camelCase fields), shared by the artifacts and models exports.
#pragma once
#include <napi.h>

#include "io/config.h"

namespace mlxb::addon {
Napi::Object model_config_to_js(Napi::Env env, const ModelConfig& c);
}  // namespace mlxb::addon
