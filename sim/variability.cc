#include "sim/variability.h"

#include <algorithm>
#include <cmath>

#include "scenarios/error.h"

namespace clustersim {

double draw_speed(const SpreadDist& d, Rng& rng) {
  if (d.dist == "none" || d.sigma <= 0) return 1.0;
  const double z = rng.normal();
  if (d.dist == "lognormal") return std::exp(d.sigma * z);
  return std::max(0.1, 1.0 + d.sigma * z);  // normal
}

double kernel_jitter_factor(double cv, uint64_t seed, int32_t rank, uint32_t op) {
  if (cv <= 0) return 1.0;
  Rng rng(stream_seed(stream_seed(seed, static_cast<uint64_t>(rank)), op));
  const double s2 = std::log1p(cv * cv);  // lognormal with mean 1 and this coefficient of variation
  return std::exp(std::sqrt(s2) * rng.normal() - s2 / 2);
}

std::vector<uint32_t> find_links(const Topology& topo, const std::string& name) {
  std::string a, b;
  bool both = false;
  if (const size_t p = name.find("<->"); p != std::string::npos) {
    a = name.substr(0, p);
    b = name.substr(p + 3);
    both = true;
  } else if (const size_t q = name.find("->"); q != std::string::npos) {
    a = name.substr(0, q);
    b = name.substr(q + 2);
  }
  std::vector<uint32_t> out;
  if (a.empty() || b.empty()) return out;
  for (const Link& l : topo.links()) {
    const std::string& src = topo.vertex(l.src).name;
    const std::string& dst = topo.vertex(l.dst).name;
    if ((src == a && dst == b) || (both && src == b && dst == a)) out.push_back(l.id);
  }
  return out;
}

std::vector<double> draw_gpu_slowdowns(const Scenario& s, const Topology& topo, uint64_t seed) {
  const VariabilityConfig& v = s.variability;
  const int gpus = topo.num_gpus();
  std::vector<double> out(static_cast<size_t>(gpus), 1.0);
  Rng rng(stream_seed(seed, 1));
  for (int g = 0; g < gpus; ++g) out[static_cast<size_t>(g)] = 1.0 / draw_speed(v.gpu_speed, rng);
  for (const Straggler& st : v.stragglers) {
    if (st.kind == "gpu") {
      out[static_cast<size_t>(st.index)] *= st.slowdown;
    } else if (st.kind == "node") {
      const int per = topo.gpus_per_node();
      for (int g = static_cast<int>(st.index) * per; g < (static_cast<int>(st.index) + 1) * per; ++g)
        out[static_cast<size_t>(g)] *= st.slowdown;
    }
  }
  return out;
}

VariabilityDraw draw_variability(const Scenario& s, const Plan& plan, const Topology& topo, uint64_t seed,
                                 bool all_ranks) {
  const VariabilityConfig& v = s.variability;
  VariabilityDraw d;
  d.kernel_jitter = v.kernel_jitter;
  d.jitter_seed = stream_seed(seed, 3);
  d.gpu_slowdown = draw_gpu_slowdowns(s, topo, seed);
  std::vector<double> link_factor;
  if (v.link_speed.dist != "none") {
    Rng rng(stream_seed(seed, 2));
    link_factor.resize(topo.links().size());
    for (double& f : link_factor) f = draw_speed(v.link_speed, rng);
  }
  for (const Straggler& st : v.stragglers) {
    if (st.kind != "link") continue;
    const std::vector<uint32_t> ids = find_links(topo, st.link);
    if (ids.empty())
      throw InputError(st.mark, "straggler link '" + st.link + "' is not in the cluster, expected \"SRC->DST\" or "
                                "\"SRC<->DST\" with vertex names such as node0/nic0 (the links table of "
                                "output.sqlite lists them)");
    if (link_factor.empty()) link_factor.assign(topo.links().size(), 1.0);
    for (uint32_t id : ids) link_factor[id] /= st.slowdown;
  }
  for (size_t l = 0; l < link_factor.size(); ++l)
    if (link_factor[l] != 1.0)
      d.link_bandwidth.emplace_back(static_cast<uint32_t>(l), topo.links()[l].bandwidth * link_factor[l]);
  d.rank_slowdown.assign(static_cast<size_t>(plan.world_size), 0.0);
  for (int32_t r = 0; r < plan.world_size; ++r) {
    const double f = d.gpu_slowdown[static_cast<size_t>(plan.rank_gpu[static_cast<size_t>(r)])];
    const int32_t to = all_ranks ? r : plan.mirror_of[static_cast<size_t>(r)];
    double& slot = d.rank_slowdown[static_cast<size_t>(to)];
    slot = std::max(slot, f);
  }
  for (double& f : d.rank_slowdown)
    if (f == 0.0) f = 1.0;  // a rank that only mirrors another
  return d;
}

}  // namespace clustersim
