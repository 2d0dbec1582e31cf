// The commands' output paths: checked before any work, so a command that could not save
// its results fails at once, and never replaces anything but the file it names (the
// writing itself is reports/output_file.h's).
#pragma once

#include <string>
#include <vector>

#include "scenarios/scenario.h"

namespace clustersim {

// output.sqlite and output.trace of a scenario: each a regular file or a new path in a
// writable folder, neither one of the scenario's inputs, not the same file twice.
void check_output_paths(const Scenario& s);
// Refuses (InputError at `mark`) an output path that is a directory, a device, a FIFO or
// anything but a regular file or a new path, or that names one of `inputs`, or whose
// directory cannot be written. `database`: a SQLite file, whose name leaves room for its journal.
void check_output(const SourceMark& mark, const std::string& key, const std::string& path,
                  const std::vector<std::string>& inputs, bool database = false);
// Refuses (InputError at the path) a database a command reads that does not exist or is not a
// regular file: SQLite would open a FIFO and block reading it, and reports a folder as an I/O
// error. `expected` says what it should be.
void check_input_file(const std::string& path, const std::string& expected);
// Every file a scenario's run reads: the scenario, its includes, its calibration profile
// and its request trace.
std::vector<std::string> scenario_inputs(const Scenario& s);
// The database a command that writes rows (sweep, search) adds to: `out` (its --out) when
// given, else the scenario's output.sqlite; checked as check_output checks a database, the
// message naming whichever it came from. Empty when neither names one.
std::string database_output(const Scenario& s, const std::string& out);

}  // namespace clustersim
