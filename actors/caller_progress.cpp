#include "actors/caller_progress.hpp"

#include <string>

#include "actors/errc.hpp"

namespace vessel::actors {

detailed_result<void> caller_progress_config::apply_env(const env_view& env) {
  if (auto p = env.get("VESSEL_PROGRESS"); p && !p->empty()) {
    if (*p != "caller" && *p != "thread") {
      return fail(make_error_code(errc::malformed_number),
                  "VESSEL_PROGRESS='" + *p + "' is neither 'caller' nor 'thread'");
    }
    enabled = *p == "caller";
  }
  auto us = env_number(env, "VESSEL_PROGRESS_SPIN_US", spin.count());
  if (!us) return us.error();
  spin = std::chrono::microseconds{us.value()};
  if (auto y = env.get("VESSEL_YIELD_WHEN_IDLE"); y && !y->empty()) {
    if (*y != "0" && *y != "1") {
      return fail(make_error_code(errc::malformed_number),
                  "VESSEL_YIELD_WHEN_IDLE='" + *y + "' is neither 0 nor 1");
    }
    yield_when_idle = *y == "1";
  }
  return outcome::success();
}

}  // namespace vessel::actors
