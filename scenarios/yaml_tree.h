// A YAML document as a plain tree that remembers where every node came from
// (file:line:col), so errors found long after parsing — in an included file, after a
// merge, after a --set — still point at the text the user wrote.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "scenarios/error.h"

namespace clustersim {

struct YNode {
  enum class Kind { Null, Scalar, Map, Seq };
  // Special members defined where YNode is complete (yaml_tree.cc): a vector of pairs
  // holding YNode must not be instantiated inside its own definition.
  YNode();
  ~YNode();
  YNode(const YNode&);
  YNode(YNode&&) noexcept;
  YNode& operator=(const YNode&);
  YNode& operator=(YNode&&) noexcept;

  Kind kind = Kind::Null;
  std::string scalar;
  std::vector<std::pair<std::string, YNode>> map;  // in document order
  std::vector<YNode> seq;
  SourceMark mark;      // where the value starts
  SourceMark key_mark;  // where its key starts (map members only)

  const YNode* find(const std::string& key) const;
  YNode* find(const std::string& key);
  std::string kind_name() const;  // "a mapping", "a list", "a value", "nothing"
};

// Parses YAML text; `file` names it in marks. Malformed YAML and duplicate keys throw
// InputError.
YNode parse_yaml(const std::string& text, const std::string& file);
YNode load_yaml_file(const std::string& path, const SourceMark& included_from,
                     const char* what = "a YAML scenario file");

// Deep merge: maps merge key by key, anything else in `over` replaces `base`.
void merge_yaml(YNode& base, const YNode& over);

// Block-style YAML for a tree, deterministic (document order preserved).
std::string emit_yaml(const YNode& node);

// The length of the well-formed UTF-8 sequence at text[i] (1 to 4), or 0.
size_t utf8_sequence(const std::string& text, size_t i);
// Refuses, at `mark`, a control character other than a tab or a newline, or bytes that are
// not UTF-8: text that would reach the tables, terminals and JSON it is printed to.
void check_decoded_text(const std::string& text, const SourceMark& mark);

}  // namespace clustersim
