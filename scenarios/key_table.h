// The scenario key table (scenarios/key_table.cc holds the table and the walk that applies it):
// each key with its type, default, one-line doc and the parser that applies it. The large
// groups are defined in their own files: keys_cluster.cc, keys_model.cc, keys_parallel.cc,
// keys_training.cc and keys_inference.cc.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "scenarios/scenario.h"
#include "scenarios/yaml_tree.h"

namespace clustersim {

struct KeySpec {
  std::string key, type, default_value, doc;
  std::function<void(const YNode&, Scenario&)> apply;  // empty for a mapping of further keys
};
using KeyList = std::vector<KeySpec>;

// Each appends its group's keys, in the order docs/scenario-keys.md lists them.
void add_cluster_keys(KeyList& t);
void add_model_keys(KeyList& t);
void add_parallel_keys(KeyList& t);
void add_training_keys(KeyList& t);
void add_inference_keys(KeyList& t);

// Every key, in the order docs/scenario-keys.md lists them.
const std::vector<KeySpec>& key_table();
const KeySpec* find_key(const std::string& key);  // nullptr: not a key
// Throws the InputError for `key` under `parent` at `mark`, naming the nearest key there
// (or the keys there), and never echoes a key that is not a plain name.
[[noreturn]] void unknown_key(std::string parent, const std::string& key, const SourceMark& mark);
// Collects the (key, node) leaves of `map` under `parent` in document order, refusing
// unknown keys; records each key's mark, the sweep and reference.unstated in `s`.
void walk(const YNode& map, const std::string& parent, std::vector<std::pair<std::string, const YNode*>>& leaves,
          Scenario& s);

}  // namespace clustersim
