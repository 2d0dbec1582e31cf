#include "cost_models/collective.h"

#include <stdexcept>
#include <string>

namespace clustersim {

std::string_view to_string(Algorithm a) {
  switch (a) {
    case Algorithm::Ring:
      return "ring";
    case Algorithm::Direct:
      return "direct";
  }
  return "?";
}

bool parse_algorithm(std::string_view s, Algorithm& out) {
  for (Algorithm a : {Algorithm::Ring, Algorithm::Direct}) {
    if (s == to_string(a)) {
      out = a;
      return true;
    }
  }
  return false;
}

namespace {

std::vector<std::pair<int32_t, int32_t>> shift(int p, int k) {
  std::vector<std::pair<int32_t, int32_t>> t;
  t.reserve(static_cast<size_t>(p));
  for (int i = 0; i < p; ++i) t.emplace_back(i, (i + k) % p);
  return t;
}

}  // namespace

std::vector<CollectiveStep> expand_collective(CollectiveKind op, Algorithm algo, int p, double bytes) {
  if (p <= 1 || bytes <= 0) return {};
  const double piece = bytes / p;
  if (algo == Algorithm::Ring) {
    // Each rank sends one S/p piece to its ring successor per step; reduce-scatter
    // (p−1 steps) then all-gather (p−1 steps) for all-reduce.
    switch (op) {
      case CollectiveKind::AllReduce:
        return {CollectiveStep{shift(p, 1), piece, 2 * static_cast<int64_t>(p - 1)}};
      case CollectiveKind::AllGather:
      case CollectiveKind::ReduceScatter:
        return {CollectiveStep{shift(p, 1), piece, p - 1}};
      default:
        break;
    }
  } else if (algo == Algorithm::Direct) {
    // Pairwise exchange: at step k rank i sends its S/p piece for rank i+k.
    switch (op) {
      case CollectiveKind::AllToAll:
      case CollectiveKind::AllGather:
      case CollectiveKind::ReduceScatter: {
        std::vector<CollectiveStep> steps;
        for (int k = 1; k < p; ++k) steps.push_back(CollectiveStep{shift(p, k), piece, 1});
        return steps;
      }
      default:
        break;
    }
  }
  throw std::invalid_argument(std::string(to_string(op)) + " has no " + std::string(to_string(algo)) + " algorithm");
}

double closed_form_seconds(CollectiveKind op, Algorithm algo, int p, double bytes, double alpha, double bandwidth) {
  if (p <= 1 || bytes <= 0) return 0;
  const double steps = (algo == Algorithm::Ring && op == CollectiveKind::AllReduce) ? 2.0 * (p - 1) : (p - 1);
  return steps * alpha + steps / p * bytes / bandwidth;
}

double busbw_factor(CollectiveKind op, int p) {
  switch (op) {
    case CollectiveKind::AllReduce:
      return 2.0 * (p - 1) / p;
    case CollectiveKind::AllGather:
    case CollectiveKind::ReduceScatter:
    case CollectiveKind::AllToAll:
      return static_cast<double>(p - 1) / p;
    case CollectiveKind::Broadcast:
    case CollectiveKind::Reduce:
      return 1.0;
  }
  return 1.0;
}

}  // namespace clustersim
