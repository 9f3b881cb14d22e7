// attach_model / unwrap_model of model_ref.h.
#include "addon/model_ref.h"

#include <string>

#include "core/error.h"

namespace mlxb::addon {

namespace {
constexpr napi_type_tag kModelTag = {0x6d6c78625f6d6f64ULL, 0x656c5f7265663031ULL};
constexpr const char* kKey = "__mlxbModel";

struct Holder {
  std::shared_ptr<Model> model;
};
}  // namespace

void attach_model(Napi::Object owner, std::shared_ptr<Model> model) {
  Napi::Env env = owner.Env();
  auto ext = Napi::External<Holder>::New(env, new Holder{std::move(model)}, [](Napi::Env, Holder* h) { delete h; });
  napi_status st = napi_type_tag_object(env, ext, &kModelTag);
  if (st != napi_ok) throw Napi::Error::New(env, "could not tag the model handle");
  owner.DefineProperty(Napi::PropertyDescriptor::Value(kKey, ext, napi_default));  // hidden: not enumerable
}

std::shared_ptr<Model> unwrap_model(Napi::Value v, const char* what) {
  Napi::Env env = v.Env();
  auto bad = [&]() { fail(ErrorCode::kInvalidArgument, std::string(what) + " must be a loaded model", what); };
  if (!v.IsObject()) bad();
  Napi::Value ext = v.As<Napi::Object>().Get(kKey);
  if (!ext.IsExternal()) bad();
  bool ok = false;
  if (napi_check_object_type_tag(env, ext, &kModelTag, &ok) != napi_ok || !ok) bad();
  Holder* h = ext.As<Napi::External<Holder>>().Data();
  if (!h->model) fail(ErrorCode::kInvalidArgument, std::string(what) + " was released", what);
  return h->model;
}

void detach_model(Napi::Object owner) {
  Napi::Value ext = owner.Get(kKey);
  if (!ext.IsExternal()) return;
  ext.As<Napi::External<Holder>>().Data()->model.reset();
}

}  // namespace mlxb::addon
