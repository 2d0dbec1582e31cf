#include "scenarios/yaml_tree.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace clustersim {

YNode::YNode() = default;
YNode::~YNode() = default;
YNode::YNode(const YNode&) = default;
YNode::YNode(YNode&&) noexcept = default;
YNode& YNode::operator=(const YNode&) = default;
YNode& YNode::operator=(YNode&&) noexcept = default;

const YNode* YNode::find(const std::string& key) const {
  for (const auto& [k, v] : map)
    if (k == key) return &v;
  return nullptr;
}

YNode* YNode::find(const std::string& key) {
  for (auto& [k, v] : map)
    if (k == key) return &v;
  return nullptr;
}

std::string YNode::kind_name() const {
  switch (kind) {
    case Kind::Null:
      return "nothing";
    case Kind::Scalar:
      return "a value";
    case Kind::Map:
      return "a mapping";
    case Kind::Seq:
      return "a list";
  }
  return "?";
}

namespace {

SourceMark mark_of(const YAML::Mark& m, const std::string& file) { return SourceMark{file, m.line + 1, m.column + 1}; }

// A document is refused once it holds more than this many nodes: aliases let a few
// hundred bytes name billions of nodes (an alias bomb), and no scenario needs a tenth.
constexpr int64_t kMaxNodes = 200'000;

// Mappings and lists nested deeper than this are refused: no scenario needs a tenth, and
// the conversion recurses once a level.
constexpr size_t kMaxDepth = 256;

// "FF" for the byte 0xFF.
std::string hex_byte(unsigned char c) {
  char b[3];
  std::snprintf(b, sizeof b, "%02X", c);
  return std::string(b);
}

}  // namespace

// The length of the well-formed UTF-8 sequence at text[i] (1 to 4), or 0: no stray
// continuation byte, overlong form, surrogate or code point past U+10FFFF.
size_t utf8_sequence(const std::string& text, size_t i) {
  const auto c = static_cast<unsigned char>(text[i]);
  const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  bool ok = n > 0 && i + n <= text.size() && (n != 2 || c >= 0xC2) && (n != 4 || c <= 0xF4);
  for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
  if (ok && n == 3) {  // no overlong forms, no surrogates
    const auto c1 = static_cast<unsigned char>(text[i + 1]);
    ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);
  }
  if (ok && n == 4) {
    const auto c1 = static_cast<unsigned char>(text[i + 1]);
    ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
  }
  return ok ? n : 0;
}

// A value as its escapes decode it ("\e", "\x1b", "\N", "\u009b"): a control character
// other than a tab or a newline, or bytes that are not UTF-8, would reach the tables and
// terminals the value is printed to (an escape sequence in a GPU's name recoloured them).
void check_decoded_text(const std::string& text, const SourceMark& mark) {
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7F)
      throw InputError(mark, "a control character (0x" + hex_byte(c) + ") in a value, expected printable text");
    const size_t n = utf8_sequence(text, i);
    if (n == 0)
      throw InputError(mark, "a byte that is not UTF-8 text (0x" + hex_byte(c) + ") in a value, expected UTF-8");
    if (n == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0)  // U+0080-U+009F
      throw InputError(mark, "a control character (U+00" + hex_byte(static_cast<unsigned char>(text[i + 1])) +
                                 ") in a value, expected printable text");
    i += n;
  }
}

namespace {

// `above`: the mappings and lists this node is inside. An alias that names an anchor
// around it makes the node graph a cycle, which would recurse without end.
YNode convert(const YAML::Node& n, const std::string& file, int64_t& budget, std::vector<YAML::Node>& above) {
  if (--budget < 0)
    throw InputError(mark_of(n.Mark(), file), "the document expands to more than " + std::to_string(kMaxNodes) +
                                                  " values (YAML aliases?), expected a scenario of plain keys");
  if (n.IsMap() || n.IsSequence()) {
    for (const YAML::Node& a : above)
      if (a.is(n))
        throw InputError(mark_of(n.Mark(), file),
                         "a YAML alias refers to an anchor that contains it, expected a value that ends");
    if (above.size() >= kMaxDepth)
      throw InputError(mark_of(n.Mark(), file), "mappings and lists nested more than " + std::to_string(kMaxDepth) +
                                                    " deep, expected a scenario of plain keys");
  }
  struct Inside {
    std::vector<YAML::Node>& above;
    Inside(std::vector<YAML::Node>& a, const YAML::Node& n) : above(a) { above.push_back(n); }
    ~Inside() { above.pop_back(); }
  } inside(above, n);
  YNode out;
  out.mark = mark_of(n.Mark(), file);
  switch (n.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      out.kind = YNode::Kind::Null;
      break;
    case YAML::NodeType::Scalar:
      out.kind = YNode::Kind::Scalar;
      out.scalar = n.Scalar();
      check_decoded_text(out.scalar, out.mark);
      break;
    case YAML::NodeType::Sequence:
      out.kind = YNode::Kind::Seq;
      for (const auto& item : n) out.seq.push_back(convert(item, file, budget, above));
      break;
    case YAML::NodeType::Map: {
      out.kind = YNode::Kind::Map;
      std::unordered_set<std::string> seen;  // duplicates in O(1) each: 50,000 keys parse in linear time
      for (const auto& kv : n) {
        SourceMark km = mark_of(kv.first.Mark(), file);
        if (!kv.first.IsScalar())
          throw InputError(km,
                           "a key must be a plain name, not " + std::string(kv.first.IsMap() ? "a mapping" : "a list"));
        std::string key = kv.first.Scalar();
        check_decoded_text(key, km);
        if (!seen.insert(key).second) throw InputError(km, "duplicate key '" + key + "'");
        YNode child = convert(kv.second, file, budget, above);
        child.key_mark = km;
        if (child.kind == YNode::Kind::Null) child.mark = km;
        out.map.emplace_back(std::move(key), std::move(child));
      }
      break;
    }
  }
  return out;
}

}  // namespace

YNode parse_yaml(const std::string& text, const std::string& file) {
  // YAML is UTF-8 text; a stray byte would pass into names, keys and the outputs' JSON.
  {
    int line = 1, col = 1;
    for (size_t i = 0; i < text.size();) {
      const auto c = static_cast<unsigned char>(text[i]);
      const size_t n = utf8_sequence(text, i);
      const bool ok = n > 0;
      // YAML's printable set leaves out the C0 controls but tab, line feed and carriage
      // return, and DEL: yaml-cpp would read a NUL as an escape, far from where it stands.
      if (ok && n == 1 && ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F))
        throw InputError(SourceMark{file, line, col},
                         "a control character (0x" + hex_byte(c) + ") that YAML does not allow, expected text");
      if (!ok)
        throw InputError(SourceMark{file, line, col},
                         "a byte that is not UTF-8 text (0x" + hex_byte(c) + "), expected a UTF-8 file");
      if (c == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
      i += n;
    }
  }
  YAML::Node root;
  // A second document would be ignored by the loader: it is an error at its marker. (A
  // line-level scan: yaml-cpp's LoadAll loops forever on some malformed inputs, such as
  // ", x", that Load reports.)
  {
    bool content = false, ended = false, opened = false;
    int line = 0;
    for (size_t at = 0; at <= text.size();) {
      size_t end = text.find('\n', at);
      if (end == std::string::npos) end = text.size();
      const std::string_view l(text.data() + at, end - at);
      ++line;
      auto is_marker = [&](std::string_view m) {
        return l.substr(0, 3) == m && (l.size() == 3 || l[3] == ' ' || l[3] == '\t' || l[3] == '\r');
      };
      const bool marker = is_marker("---"), stop = is_marker("...");
      // The second marker opens a second document even where the first is empty (the loader
      // reads the first, null, and drops the rest).
      if (marker && (content || opened))
        throw InputError(SourceMark{file, line, 1},
                         "a second YAML document ('---'): a scenario is one document, expected its keys in the first");
      if (marker) opened = true;
      const size_t first = l.find_first_not_of(" \t\r");
      // A directive (%YAML, %TAG) at the start of a line before the first marker heads the
      // document; it is not content.
      const bool directive = !content && !l.empty() && l[0] == '%';
      const bool text_here = !marker && !stop && !directive && first != std::string_view::npos && l[first] != '#';
      // The loader stops at the end marker: what follows it would be silently ignored.
      if (ended && text_here)
        throw InputError(SourceMark{file, line, static_cast<int>(first) + 1},
                         "text after the document's end ('...'), expected the scenario's keys before it");
      if (stop) ended = true;
      if (text_here) content = true;
      at = end + 1;
    }
  }
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    // yaml-cpp reports its recursion limit as "bad file".
    throw InputError(mark_of(e.mark, file), e.msg == "bad file"
                                                ? "malformed YAML: nested deeper than the parser takes, expected a "
                                                  "scenario's few levels of keys and lists"
                                                : "malformed YAML: " + e.msg);
  }
  int64_t budget = kMaxNodes;
  std::vector<YAML::Node> above;
  YNode out = convert(root, file, budget, above);
  if (out.kind == YNode::Kind::Null) out.mark = SourceMark{file, 1, 1};
  return out;
}

YNode load_yaml_file(const std::string& path, const SourceMark& included_from, const char* what) {
  const SourceMark where = included_from.known() ? included_from : SourceMark{path, 0, 0};
  // Only regular files, and not huge ones: a directory, a device (/dev/zero) or a FIFO
  // would read as nothing or never end.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
    throw InputError(where, "'" + path + "' is not a regular file, expected " + what);
  if (!ec && std::filesystem::is_regular_file(status) && std::filesystem::file_size(path, ec) > (64u << 20))
    throw InputError(where, "'" + path + "' is larger than 64 MiB, expected " + what);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    // Why, where the file system says: missing, a link to nothing or in a loop, no permission.
    const int e = errno;
    std::string noun = what;  // "a YAML scenario file" -> "scenario file"
    if (noun.rfind("a YAML ", 0) == 0) noun = noun.substr(7);
    throw InputError(where, "cannot read " + noun + " '" + path + "'" +
                                (e != 0 ? std::string(": ") + std::strerror(e) : std::string()));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_yaml(ss.str(), path);
}

void merge_yaml(YNode& base, const YNode& over) {
  if (base.kind != YNode::Kind::Map || over.kind != YNode::Kind::Map) {
    SourceMark km = base.key_mark;
    base = over;
    if (!base.key_mark.known()) base.key_mark = km;
    return;
  }
  // The later file wins the position too, so errors about a merged block point at the
  // block the user is most likely editing.
  base.mark = over.mark;
  if (over.key_mark.known()) base.key_mark = over.key_mark;
  for (const auto& [k, v] : over.map) {
    if (YNode* existing = base.find(k))
      merge_yaml(*existing, v);
    else
      base.map.emplace_back(k, v);
  }
}

namespace {
void emit(YAML::Emitter& e, const YNode& n) {
  switch (n.kind) {
    case YNode::Kind::Null:
      e << YAML::Null;
      break;
    case YNode::Kind::Scalar:
      e << n.scalar;
      break;
    case YNode::Kind::Seq:
      e << YAML::BeginSeq;
      for (const auto& item : n.seq) emit(e, item);
      e << YAML::EndSeq;
      break;
    case YNode::Kind::Map:
      e << YAML::BeginMap;
      for (const auto& [k, v] : n.map) {
        e << YAML::Key << k << YAML::Value;
        emit(e, v);
      }
      e << YAML::EndMap;
      break;
  }
}
}  // namespace

std::string emit_yaml(const YNode& node) {
  YAML::Emitter e;
  emit(e, node);
  return std::string(e.c_str()) + "\n";
}

}  // namespace clustersim
