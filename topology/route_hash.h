// The route table's hashing, shared by the route search (topology_routes.cc) and the
// structured routes (topology_fast_routes.cc).
#pragma once

#include <cstdint>

namespace clustersim::route_hash {

// A pair's key in the route table.
inline uint64_t route_key(int src, int dst) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(src)) << 32) | static_cast<uint32_t>(dst);
}
inline uint64_t mix(uint64_t x) {  // splitmix64 finalizer: a fixed, portable hash for ECMP
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace clustersim::route_hash
