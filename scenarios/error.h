// Errors are values until the edge: library code throws InputError (a typed error
// carrying file:line:col) and only main() turns it into a message and an exit code.
#pragma once

#include <stdexcept>
#include <string>

namespace clustersim {

// `text` fit for a one-line message: long quoted values elided, control bytes escaped.
std::string printable(const std::string& text);

// Where a value came from: a YAML file position (1-based line and column), a
// command-line `--set` (file = "--set", line = index of the flag), or nowhere.
struct SourceMark {
  std::string file;
  int line = 0;
  int column = 0;
  bool known() const { return line > 0; }
  std::string str() const;  // "file:line:col" or "file" when line is unknown
};

class InputError : public std::runtime_error {
 public:
  InputError(SourceMark mark, const std::string& what);
  const SourceMark& mark() const { return mark_; }
  const std::string& detail() const { return detail_; }

 private:
  SourceMark mark_;
  std::string detail_;
};

}  // namespace clustersim
