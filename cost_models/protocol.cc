#include "cost_models/protocol.h"

namespace clustersim {

std::string_view to_string(Protocol p) {
  switch (p) {
    case Protocol::LL:
      return "LL";
    case Protocol::LL128:
      return "LL128";
    case Protocol::Simple:
      return "Simple";
  }
  return "?";
}

bool parse_protocol(std::string_view s, Protocol& out) {
  for (Protocol p : {Protocol::LL, Protocol::LL128, Protocol::Simple})
    if (s == to_string(p)) {
      out = p;
      return true;
    }
  return false;
}

}  // namespace clustersim
