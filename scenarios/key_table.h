// The scenario key table's parts (scenarios/scenario.cc holds the table and the walk that applies
// it): each key with its type, default, one-line doc and the parser that applies it. The large
// groups are defined in their own files: keys_cluster.cc, keys_model.cc, keys_parallel.cc,
// keys_training.cc and keys_inference.cc.
#pragma once

#include <functional>
#include <string>
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

}  // namespace clustersim
