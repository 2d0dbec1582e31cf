#include "plan/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "plan/rng.h"

namespace clustersim {

double moe_hot_rank_load(const MoeConfig& moe, int64_t routed_tokens, int64_t ep, int32_t layer, int32_t micro_batch) {
  const MoeRouting& r = moe.routing;
  const int64_t experts = moe.experts;
  if (r.dist == "even" || experts <= 0 || routed_tokens <= 0) return 1.0;
  std::vector<double> p(static_cast<size_t>(experts), 1.0 / static_cast<double>(experts));
  if (r.dist == "zipf") {
    // Popularity by rank, the ranks in a random order per layer: each layer has its own
    // hot experts, the same in every micro-batch.
    std::vector<int64_t> order(static_cast<size_t>(experts));
    std::iota(order.begin(), order.end(), 0);
    Rng shuffle(stream_seed(r.seed, 0x5EED0000ull + static_cast<uint64_t>(layer)));
    for (size_t i = order.size() - 1; i > 0; --i)
      std::swap(order[i], order[static_cast<size_t>(shuffle.next() % (i + 1))]);
    double sum = 0;
    for (int64_t k = 0; k < experts; ++k) sum += std::pow(static_cast<double>(k + 1), -r.alpha);
    for (int64_t k = 0; k < experts; ++k)
      p[static_cast<size_t>(order[static_cast<size_t>(k)])] = std::pow(static_cast<double>(k + 1), -r.alpha) / sum;
  } else if (r.dist == "histogram") {
    const double sum = std::accumulate(r.histogram.begin(), r.histogram.end(), 0.0);
    for (int64_t e = 0; e < experts; ++e) p[static_cast<size_t>(e)] = r.histogram[static_cast<size_t>(e)] / sum;
  }
  Rng rng(stream_seed(stream_seed(r.seed, 0xE0E0ull + static_cast<uint64_t>(layer)), static_cast<uint64_t>(micro_batch) + 1));
  const double n = static_cast<double>(routed_tokens);
  const double cap = moe.capacity_factor * n / static_cast<double>(experts);
  const int64_t local = experts / std::max<int64_t>(1, ep);
  // The experts' counts, multinomial (n, p) in the normal law: independent deviations
  // d_e ~ N(0, n·p_e), less p_e times their sum, have the multinomial's covariance
  // n·(diag p − p pᵀ) and sum to zero, so the counts sum to the n routed, every rank's
  // share together (one rank, under EP 1, takes exactly n).
  std::vector<double> count(static_cast<size_t>(experts));
  double drift = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const double pe = p[static_cast<size_t>(e)];
    count[static_cast<size_t>(e)] = std::sqrt(n * pe) * rng.normal();
    drift += count[static_cast<size_t>(e)];
  }
  double hot = 0;
  for (int64_t rank = 0; rank < experts / local; ++rank) {
    double load = 0;
    for (int64_t e = rank * local; e < (rank + 1) * local; ++e) {
      const double pe = p[static_cast<size_t>(e)];
      double c = std::max(0.0, n * pe + count[static_cast<size_t>(e)] - pe * drift);
      if (!r.dropless) c = std::min(c, cap);
      load += c;
    }
    hot = std::max(hot, load);
  }
  return hot / (n / static_cast<double>(experts / local));
}

}  // namespace clustersim
