// How addon classes hand a loaded Model to each other: the class that owns one attaches it to its
// JS object (attach_model), and any consumer (generation, scoring) gets it back (unwrap_model)
// without knowing the owner's class. The model travels as a type-tagged napi external holding a
// shared_ptr, so a wrong object is a typed error, never a bad cast.
#pragma once
#include <napi.h>

#include <memory>

#include "models/model.h"

namespace mlxb::addon {

void attach_model(Napi::Object owner, std::shared_ptr<Model> model);
// Throws Error(kInvalidArgument) naming `what` when `v` carries no model (or its model was released).
std::shared_ptr<Model> unwrap_model(Napi::Value v, const char* what = "model");
// Drops the owner's reference (the Model dies once running work lets go of it too).
void detach_model(Napi::Object owner);

}  // namespace mlxb::addon
