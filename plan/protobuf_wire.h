// The protobuf wire format, by hand: enough to write and read Chakra execution traces
// (varints, length-delimited fields, packed repeated varints, fixed64 doubles) without a
// protobuf library or generated code. https://protobuf.dev/programming-guides/encoding/
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace clustersim::wire {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

class Writer {
 public:
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_ += static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    out_ += static_cast<char>(v);
  }
  void key(uint32_t field, WireType t) { varint((static_cast<uint64_t>(field) << 3) | t); }
  void u64(uint32_t field, uint64_t v) {
    key(field, kVarint);
    varint(v);
  }
  void i64(uint32_t field, int64_t v) { u64(field, static_cast<uint64_t>(v)); }  // int32/int64: two's complement
  void boolean(uint32_t field, bool v) { u64(field, v ? 1 : 0); }
  void f64(uint32_t field, double v) {
    key(field, kFixed64);
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    for (int i = 0; i < 8; ++i) out_ += static_cast<char>((bits >> (8 * i)) & 0xff);
  }
  void bytes(uint32_t field, std::string_view s) {
    key(field, kLength);
    varint(s.size());
    out_.append(s);
  }
  void packed(uint32_t field, const std::vector<uint64_t>& v) {
    if (v.empty()) return;
    Writer w;
    for (uint64_t x : v) w.varint(x);
    bytes(field, w.str());
  }
  const std::string& str() const { return out_; }
  std::string& str() { return out_; }

 private:
  std::string out_;
};

// One field as read: its number and type, and its value (varint / fixed64 bits) or bytes.
struct Field {
  uint32_t number = 0;
  WireType type = kVarint;
  uint64_t value = 0;
  std::string_view data;
  double as_double() const {
    double d;
    std::memcpy(&d, &value, sizeof d);
    return d;
  }
};

struct ParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Reader {
 public:
  explicit Reader(std::string_view data) : d_(data) {}
  bool done() const { return p_ >= d_.size(); }
  size_t offset() const { return p_; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= d_.size()) throw ParseError("truncated varint");
      const auto b = static_cast<uint8_t>(d_[p_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw ParseError("varint longer than 10 bytes");
  }
  std::string_view take(uint64_t n) {
    if (n > d_.size() - p_) throw ParseError("length past the end of the data");
    const std::string_view s = d_.substr(p_, static_cast<size_t>(n));
    p_ += static_cast<size_t>(n);
    return s;
  }
  Field field() {
    Field f;
    const uint64_t k = varint();
    f.number = static_cast<uint32_t>(k >> 3);
    f.type = static_cast<WireType>(k & 7);
    switch (f.type) {
      case kVarint:
        f.value = varint();
        break;
      case kFixed64: {
        const std::string_view b = take(8);
        for (int i = 7; i >= 0; --i) f.value = (f.value << 8) | static_cast<uint8_t>(b[static_cast<size_t>(i)]);
        break;
      }
      case kLength:
        f.data = take(varint());
        break;
      case kFixed32: {
        const std::string_view b = take(4);
        for (int i = 3; i >= 0; --i) f.value = (f.value << 8) | static_cast<uint8_t>(b[static_cast<size_t>(i)]);
        break;
      }
      default:
        throw ParseError("unsupported wire type " + std::to_string(static_cast<int>(f.type)));
    }
    if (f.number == 0) throw ParseError("field number 0");
    return f;
  }
  // The values of a repeated varint field, packed or not.
  static void append_varints(const Field& f, std::vector<uint64_t>& out) {
    if (f.type == kVarint) {
      out.push_back(f.value);
      return;
    }
    Reader r(f.data);
    while (!r.done()) out.push_back(r.varint());
  }

 private:
  std::string_view d_;
  size_t p_ = 0;
};

}  // namespace clustersim::wire
