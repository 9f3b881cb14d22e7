// The one exception type of the native core. Every error carries a code that the addon maps to
// a typed JS error class (lib/errors.ts) and, where it applies, the offending field or tensor.
#pragma once
#include <stdexcept>
#include <string>

namespace mlxb {

enum class ErrorCode {
  kInvalidArgument,  // a caller passed something impossible (JS validated most of it already)
  kInvalidFile,      // a checkpoint file is malformed (safetensors header, sizes, offsets)
  kInvalidConfig,    // config.json is missing a field or holds an impossible value
  kUnsupported,      // well-formed but not something we run (model_type, rope type, dtype)
  kOutOfMemory,      // an allocation failed; message names what did not fit
  kNotBuilt,         // a backend that this binary was built without
  kIo,               // the operating system refused (open, mmap, read)
  kAborted,          // the caller cancelled
  kBusy,             // a bounded queue is full; retry later
  kInternal,         // a bug of ours
};

inline const char* error_code_name(ErrorCode c) {
  switch (c) {
    case ErrorCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case ErrorCode::kInvalidFile: return "INVALID_FILE";
    case ErrorCode::kInvalidConfig: return "INVALID_CONFIG";
    case ErrorCode::kUnsupported: return "UNSUPPORTED";
    case ErrorCode::kOutOfMemory: return "OUT_OF_MEMORY";
    case ErrorCode::kNotBuilt: return "NOT_BUILT";
    case ErrorCode::kIo: return "IO";
    case ErrorCode::kAborted: return "ABORTED";
    case ErrorCode::kBusy: return "BUSY";
    case ErrorCode::kInternal: return "INTERNAL";
  }
  return "INTERNAL";
}

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message, std::string field = {})
      : std::runtime_error(message), code_(code), field_(std::move(field)) {}
  ErrorCode code() const { return code_; }
  // The config field, tensor name or option the error is about; empty when none applies.
  const std::string& field() const { return field_; }

 private:
  ErrorCode code_;
  std::string field_;
};

[[noreturn]] inline void fail(ErrorCode code, const std::string& message, std::string field = {}) {
  throw Error(code, message, std::move(field));
}

#define MLXB_CHECK(cond, msg) \
  do { if (!(cond)) ::mlxb::fail(::mlxb::ErrorCode::kInternal, std::string("check failed: ") + (msg)); } while (0)

}  // namespace mlxb
