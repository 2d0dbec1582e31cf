// `--set key=value` on a scenario's merged YAML tree: the key checked against the key table
// (its first unknown part named), the value parsed as YAML and put in place; sweep.KEY sets one
// list of the sweep, whose keys are key paths; a null value restores a key's default.
#include "scenarios/set_option.h"

#include <string>
#include <vector>

#include "scenarios/error.h"
#include "scenarios/key_table.h"

namespace clustersim {

void set_node(YNode& root, const std::string& key, const YNode& value) {
  YNode* cur = &root;
  size_t start = 0;
  for (;;) {
    size_t dot = key.find('.', start);
    std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    YNode* next = cur->find(part);
    if (dot == std::string::npos) {
      if (next)
        *next = value;
      else
        cur->map.emplace_back(part, value);
      return;
    }
    if (!next) {
      YNode m;
      m.kind = YNode::Kind::Map;
      m.mark = m.key_mark = value.mark;
      cur->map.emplace_back(part, m);
      next = &cur->map.back().second;
    } else if (next->kind != YNode::Kind::Map) {
      next->kind = YNode::Kind::Map;
      next->map.clear();
    }
    cur = next;
    start = dot + 1;
  }
}

namespace {

// Removes the entry at the dotted `key`, if there is one.
void remove_node(YNode& root, const std::string& key) {
  YNode* cur = &root;
  for (size_t start = 0;;) {
    if (cur->kind != YNode::Kind::Map) return;
    const size_t dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (dot == std::string::npos) {
      std::erase_if(cur->map, [&](const auto& kv) { return kv.first == part; });
      return;
    }
    cur = cur->find(part);
    if (!cur) return;
    start = dot + 1;
  }
}

// YAML's spellings of null, as a --set value.
bool is_null_text(const std::string& text) {
  return text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL";
}

// The value after '=' parsed as YAML, its marks (an error's too) in columns of the whole
// --set text: YAML counts them from the value's first character.
YNode parse_value(const std::string& arg, size_t eq, const std::string& file) {
  const int shift = static_cast<int>(eq) + 1;
  auto moved = [&](SourceMark m) {
    if (m.line == 1) m.column += shift;
    return m;
  };
  YNode value;
  try {
    value = parse_yaml(arg.substr(eq + 1), file);
  } catch (const InputError& e) {
    throw InputError(moved(e.mark()), e.detail());
  }
  auto walk = [&](auto&& self, YNode& n) -> void {
    n.mark = moved(n.mark);
    n.key_mark = moved(n.key_mark);
    for (auto& kv : n.map) self(self, kv.second);
    for (YNode& item : n.seq) self(self, item);
  };
  walk(walk, value);
  return value;
}

}  // namespace

void apply_set(YNode& root, const std::string& arg) {
  const std::string file = "--set '" + arg + "'";
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError(SourceMark{file, 1, 1}, "--set expects key=value, e.g. --set parallel.tp=4");
  const std::string key = arg.substr(0, eq);
  // Nothing after '=' (an unset shell variable's `--set parallel.tp=$TP`) is not taken for
  // null: the default is asked for by name.
  if (eq + 1 == arg.size())
    throw InputError(SourceMark{file, 1, static_cast<int>(eq) + 2},
                     key + " has no value, expected one after '=' (or null for the default)");
  if (key.front() == '.' || key.back() == '.' || key.find("..") != std::string::npos)
    throw InputError(
        SourceMark{file, 1, 1}, "--set key '" + key +
                                    "' has an empty part, expected dotted names such as parallel.tp; "
                                    "top-level keys: " +
                                    [] {
                                      std::string t;
                                      for (const auto& k : key_table())
                                        if (k.key.find('.') == std::string::npos) t += (t.empty() ? "" : ", ") + k.key;
                                      return t;
                                    }());
  // sweep's keys are themselves dotted key paths: sweep.parallel.tp=[2,4] is the sweep's
  // entry parallel.tp, as the scenario writes it under sweep:.
  if (key.rfind("sweep.", 0) == 0) {
    const std::string target = key.substr(6);
    const KeySpec* t = find_key(target);
    if (!t || !t->apply || target == "sweep" || target.rfind("sweep.", 0) == 0)
      throw InputError(SourceMark{file, 1, 1}, "sweep: unknown key '" + target +
                                                   "', expected a key that takes a value, e.g. "
                                                   "sweep.parallel.tp=[2,4,8]");
    YNode value = parse_value(arg, eq, file);
    value.mark = SourceMark{file, 1, static_cast<int>(eq) + 2};
    value.key_mark = SourceMark{file, 1, 1};
    YNode* sweep = root.find("sweep");
    // sweep.KEY=null takes that list out of the sweep (and an emptied sweep: out of the scenario).
    if (is_null_text(arg.substr(eq + 1))) {
      if (sweep && sweep->kind == YNode::Kind::Map) {
        std::erase_if(sweep->map, [&](const auto& kv) { return kv.first == target; });
        if (sweep->map.empty()) remove_node(root, "sweep");
      }
      return;
    }
    if (!sweep) {
      YNode m;
      m.kind = YNode::Kind::Map;
      m.mark = m.key_mark = value.key_mark;
      root.map.emplace_back("sweep", m);
      sweep = &root.map.back().second;
    } else if (sweep->kind != YNode::Kind::Map) {
      sweep->kind = YNode::Kind::Map;
      sweep->map.clear();
    }
    if (YNode* entry = sweep->find(target))
      *entry = value;
    else
      sweep->map.emplace_back(target, value);
    return;
  }
  const KeySpec* spec = find_key(key);
  // KEY=null (or KEY=~): the key as if not written, its default; a block's keys all
  // (output=null: no output files). Only those spellings: text that merely parses to nothing
  // stays an error at the key.
  if (spec && key != "include" && is_null_text(arg.substr(eq + 1))) {
    remove_node(root, key);
    return;
  }
  if (spec && !spec->apply)
    throw InputError(SourceMark{file, 1, 1},
                     "'" + key + "' is " +
                         (key == "include" ? "not settable from the command line"
                                           : "a mapping; set one of its keys, e.g. " + key + ".<key>=value"));
  if (!spec) {
    // The first part of the key that names nothing, under the longest prefix that does.
    std::string parent;
    for (size_t at = 0;;) {
      const size_t dot = key.find('.', at);
      const std::string head = key.substr(0, dot);
      if (dot == std::string::npos || !find_key(head))
        unknown_key(parent, key.substr(at, dot == std::string::npos ? std::string::npos : dot - at),
                    SourceMark{file, 1, 1});
      parent = head;
      at = dot + 1;
    }
  }
  YNode value = parse_value(arg, eq, file);
  const int col = static_cast<int>(eq) + 2;
  value.mark = SourceMark{file, 1, col};
  value.key_mark = SourceMark{file, 1, 1};
  set_node(root, key, value);
}

}  // namespace clustersim
