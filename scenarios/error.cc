#include "scenarios/error.h"

namespace clustersim {

std::string SourceMark::str() const {
  if (!known()) return file.empty() ? std::string("<input>") : file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

InputError::InputError(SourceMark mark, const std::string& what)
    : std::runtime_error(mark.str() + ": error: " + what), mark_(std::move(mark)), detail_(what) {}

}  // namespace clustersim
