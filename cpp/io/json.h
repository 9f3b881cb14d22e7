// A small strict JSON reader (RFC 8259) for checkpoint headers and config files: UTF-8 checked,
// duplicate object keys rejected, nesting depth bounded, integers kept exact when they fit in
// int64. Not a writer and not a general-purpose DOM: values are immutable after parsing.
// Errors are JsonError (message with byte offset); callers turn them into their own Error codes.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mlxb::json {

struct JsonError : std::runtime_error {
  explicit JsonError(const std::string& m) : std::runtime_error(m) {}
};

enum class Kind : uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };

const char* kind_name(Kind k);  // "null", "boolean", "number", "string", "array", "object"

class Value {
 public:
  using Member = std::pair<std::string, Value>;

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_number() const { return kind_ == Kind::kNumber; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }
  // A number written without fraction or exponent that fits in int64.
  bool is_int() const { return kind_ == Kind::kNumber && is_int_; }

  bool as_bool() const { return bool_; }
  double as_double() const { return num_; }   // numbers only (ints converted)
  int64_t as_int() const { return int_; }     // is_int() only
  const std::string& as_string() const { return str_; }
  const std::vector<Value>& items() const { return items_; }      // arrays
  const std::vector<Member>& members() const { return members_; }  // objects, in file order
  // The member named `key` of an object, or nullptr (also for non-objects).
  const Value* find(const std::string& key) const;

 private:
  friend class Parser;
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  bool is_int_ = false;
  double num_ = 0.0;
  int64_t int_ = 0;
  std::string str_;
  std::vector<Value> items_;
  std::vector<Member> members_;
};

struct ParseOptions {
  int max_depth = 64;
  // Python's json module writes NaN / Infinity / -Infinity for non-finite floats; config files
  // may carry them. Accepted only when set, so the caller can report the field by name.
  bool allow_nan_literals = false;
};

// Parses the whole of `text` (surrounding whitespace allowed, nothing else after the value).
Value parse(const char* text, size_t size, const ParseOptions& opts = {});
inline Value parse(const std::string& text, const ParseOptions& opts = {}) { return parse(text.data(), text.size(), opts); }

// True when `s` is well-formed UTF-8 (no overlong forms, surrogates or code points > U+10FFFF).
bool valid_utf8(const char* s, size_t n);

}  // namespace mlxb::json
