// `--set key=value` applied to a scenario's YAML tree before its keys are read.
#pragma once

#include <string>

#include "scenarios/yaml_tree.h"

namespace clustersim {

// Puts `value` at the dotted `key` of `root`, creating mappings on the way (a scalar on the
// way becomes a mapping).
void set_node(YNode& root, const std::string& key, const YNode& value);
// Puts `arg`'s value ("key=value", the value YAML) at its dotted key in `root`, or, for
// sweep.KEY=[...], at the entry KEY of the sweep: block. A null value (KEY=null, KEY=~ or
// KEY=) removes the key, so its default applies (sweep.KEY=null: that list leaves the sweep). Throws InputError (marked
// "--set 'arg'") for a malformed pair or a key that names nothing.
void apply_set(YNode& root, const std::string& arg);

}  // namespace clustersim
