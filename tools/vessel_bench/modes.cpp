#include "tools/vessel_bench/modes.hpp"

namespace vessel::bench {

namespace {

// Function-local so that registrations from other translation units' static initialisers
// never see an unconstructed table.
std::vector<mode_entry>& table() {
  static std::vector<mode_entry> entries;
  return entries;
}

} // namespace

std::span<const mode_entry> registered_modes() {
  return table();
}

bool register_mode(const mode_entry& entry) {
  table().push_back(entry);
  return true;
}

} // namespace vessel::bench
