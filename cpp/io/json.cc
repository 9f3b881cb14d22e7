// Strict recursive-descent JSON parser (see json.h for what it accepts).
#include "io/json.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <unordered_set>

namespace mlxb::json {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kNull: return "null";
    case Kind::kBool: return "boolean";
    case Kind::kNumber: return "number";
    case Kind::kString: return "string";
    case Kind::kArray: return "array";
    case Kind::kObject: return "object";
  }
  return "?";
}

const Value* Value::find(const std::string& key) const {
  if (kind_ != Kind::kObject) return nullptr;
  for (const Member& m : members_)
    if (m.first == key) return &m.second;
  return nullptr;
}

bool valid_utf8(const char* s, size_t n) {
  const auto* p = reinterpret_cast<const unsigned char*>(s);
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c < 0x80) { ++i; continue; }
    int len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; }
    else return false;  // continuation byte, overlong lead (c0/c1) or > f4
    if (n - i < static_cast<size_t>(len)) return false;
    for (int k = 1; k < len; ++k) {
      unsigned cc = p[i + k];
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff))) return false;
    if (cp >= 0xd800 && cp <= 0xdfff) return false;
    i += static_cast<size_t>(len);
  }
  return true;
}

class Parser {
 public:
  Parser(const char* s, size_t n, const ParseOptions& o) : s_(s), n_(n), opts_(o) {}

  Value run() {
    if (!valid_utf8(s_, n_)) throw JsonError("text is not valid UTF-8");
    skip_ws();
    Value v = value(0);
    skip_ws();
    if (i_ != n_) error("unexpected data after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    throw JsonError(what + " at byte " + std::to_string(i_));
  }
  void skip_ws() {
    while (i_ < n_ && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool literal(const char* word) {
    size_t k = 0;
    while (word[k]) {
      if (i_ + k >= n_ || s_[i_ + k] != word[k]) return false;
      ++k;
    }
    i_ += k;
    return true;
  }

  Value value(int depth) {
    if (i_ >= n_) error("unexpected end of JSON");
    Value v;
    char c = s_[i_];
    if (c == '{') return object(depth + 1);
    if (c == '[') return array(depth + 1);
    if (c == '"') { v.kind_ = Kind::kString; v.str_ = string(); return v; }
    if (literal("true")) { v.kind_ = Kind::kBool; v.bool_ = true; return v; }
    if (literal("false")) { v.kind_ = Kind::kBool; return v; }
    if (literal("null")) return v;
    if (opts_.allow_nan_literals) {
      v.kind_ = Kind::kNumber;
      if (literal("NaN")) { v.num_ = std::numeric_limits<double>::quiet_NaN(); return v; }
      if (literal("Infinity")) { v.num_ = std::numeric_limits<double>::infinity(); return v; }
      if (literal("-Infinity")) { v.num_ = -std::numeric_limits<double>::infinity(); return v; }
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    error("unexpected character");
  }

  Value object(int depth) {
    if (depth > opts_.max_depth) error("nesting too deep");
    Value v;
    v.kind_ = Kind::kObject;
    ++i_;  // '{'
    skip_ws();
    if (i_ < n_ && s_[i_] == '}') { ++i_; return v; }
    std::unordered_set<std::string> seen;
    for (;;) {
      skip_ws();
      if (i_ >= n_ || s_[i_] != '"') error("expected a string key");
      std::string key = string();
      if (!seen.insert(key).second) error("duplicate key \"" + key + "\"");
      skip_ws();
      if (i_ >= n_ || s_[i_] != ':') error("expected ':'");
      ++i_;
      skip_ws();
      v.members_.emplace_back(std::move(key), value(depth));
      skip_ws();
      if (i_ < n_ && s_[i_] == ',') { ++i_; continue; }
      if (i_ < n_ && s_[i_] == '}') { ++i_; return v; }
      error("expected ',' or '}'");
    }
  }

  Value array(int depth) {
    if (depth > opts_.max_depth) error("nesting too deep");
    Value v;
    v.kind_ = Kind::kArray;
    ++i_;  // '['
    skip_ws();
    if (i_ < n_ && s_[i_] == ']') { ++i_; return v; }
    for (;;) {
      skip_ws();
      v.items_.push_back(value(depth));
      skip_ws();
      if (i_ < n_ && s_[i_] == ',') { ++i_; continue; }
      if (i_ < n_ && s_[i_] == ']') { ++i_; return v; }
      error("expected ',' or ']'");
    }
  }

  uint32_t hex4() {
    if (n_ - i_ < 4) error("truncated \\u escape");
    uint32_t cp = 0;
    for (int k = 0; k < 4; ++k) {
      char h = s_[i_++];
      cp <<= 4;
      if (h >= '0' && h <= '9') cp |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') cp |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') cp |= static_cast<uint32_t>(h - 'A' + 10);
      else error("bad hex digit in \\u escape");
    }
    return cp;
  }

  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  std::string string() {
    ++i_;  // opening quote
    std::string out;
    for (;;) {
      if (i_ >= n_) error("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') { ++i_; return out; }
      if (c < 0x20) error("control character in string");
      if (c != '\\') { out += static_cast<char>(c); ++i_; continue; }
      ++i_;
      if (i_ >= n_) error("unterminated escape");
      char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xdc00 && cp <= 0xdfff) error("lone low surrogate in \\u escape");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            if (n_ - i_ < 2 || s_[i_] != '\\' || s_[i_ + 1] != 'u') error("lone high surrogate in \\u escape");
            i_ += 2;
            uint32_t lo = hex4();
            if (lo < 0xdc00 || lo > 0xdfff) error("bad low surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          put_utf8(out, cp);
          break;
        }
        default: error("bad escape character");
      }
    }
  }

  Value number() {
    size_t start = i_;
    bool integral = true;
    if (s_[i_] == '-') ++i_;
    if (i_ >= n_) error("truncated number");
    if (s_[i_] == '0') {
      ++i_;
    } else if (s_[i_] >= '1' && s_[i_] <= '9') {
      while (i_ < n_ && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    } else {
      error("bad number");
    }
    if (i_ < n_ && s_[i_] == '.') {
      integral = false;
      ++i_;
      if (i_ >= n_ || s_[i_] < '0' || s_[i_] > '9') error("digit expected after '.'");
      while (i_ < n_ && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    }
    if (i_ < n_ && (s_[i_] == 'e' || s_[i_] == 'E')) {
      integral = false;
      ++i_;
      if (i_ < n_ && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (i_ >= n_ || s_[i_] < '0' || s_[i_] > '9') error("digit expected in exponent");
      while (i_ < n_ && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    }
    Value v;
    v.kind_ = Kind::kNumber;
    const char* b = s_ + start;
    const char* e = s_ + i_;
    if (integral) {
      int64_t x = 0;
      auto r = std::from_chars(b, e, x);
      if (r.ec == std::errc() && r.ptr == e) {
        v.is_int_ = true;
        v.int_ = x;
        v.num_ = static_cast<double>(x);
        return v;
      }
    }
    double d = 0.0;
    auto r = std::from_chars(b, e, d);
    if (r.ec == std::errc::result_out_of_range) {
      // Magnitude beyond double: keep the sign, callers reject non-finite numbers by field.
      d = (*b == '-') ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
      bool tiny = false;
      for (const char* p = b; p < e; ++p)
        if (*p == 'e' || *p == 'E') { tiny = p[1] == '-'; break; }
      if (tiny) d = 0.0;
    } else if (r.ec != std::errc() || r.ptr != e) {
      error("bad number");
    }
    v.num_ = d;
    return v;
  }

  const char* s_;
  size_t n_;
  size_t i_ = 0;
  ParseOptions opts_;
};

Value parse(const char* text, size_t size, const ParseOptions& opts) { return Parser(text, size, opts).run(); }

}  // namespace mlxb::json
