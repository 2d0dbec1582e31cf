// A serving run's requests: when each arrives and how long its prompt and output are, drawn
// from the scenario's arrival process and length distributions or read from its trace.
#pragma once

#include <cstdint>
#include <vector>

#include "scenarios/scenario.h"

namespace clustersim {

struct Arrival {
  double t;
  int64_t prompt, output;
  int64_t group = -1;  // the shared prefix the prompt opens with (-1: none)
};

// The scenario's requests in arrival order: its trace's rows (inference.arrivals.trace, each
// checked at its line and column) or inference.requests draws of its process and lengths.
std::vector<Arrival> make_arrivals(const Scenario& s);

}  // namespace clustersim
