#include "actors/actor_errc.hpp"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <vector>
#include <string_view>

#include <caf/atom.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>

#include "actors/errc.hpp"
#include "io/errc.hpp"
#include "wire/errc.hpp"

namespace vessel::actors {
namespace {

class actor_error_category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "vessel.actor"; }

  std::string message(int value) const override {
    switch (static_cast<actor_errc>(value)) {
      case actor_errc::child_escalated: return "a supervised child kept failing and was given up";
      case actor_errc::child_start_failed: return "a supervised child could not be started";
      case actor_errc::unhandled_exception: return "an actor's handler threw an exception";
      case actor_errc::peer_lost: return "the peer is lost";
      case actor_errc::node_stopped: return "the node is shutting down";
      case actor_errc::no_such_child: return "no supervised child has that name";
      case actor_errc::device_timeout: return "the device did not answer in time";
      case actor_errc::device_busy: return "the device's request queue is full";
      case actor_errc::receive_timeout: return "no matching message arrived in time";
      case actor_errc::send_pushed_back:
        return "too many sends wait for the link to that rank: pushed back, retry later";
    }
    return "unknown vessel.actor error";
  }
};

constexpr std::uint8_t overflow_code = 255;

caf::atom_value vessel_atom() noexcept { return caf::atom("vessel"); }

struct category_registry {
  std::mutex mutex;
  std::vector<const std::error_category*> categories{
      &actor_category(), &actors_category(), &io::io_category(), &wire::wire_category(),
      &std::generic_category(), &std::system_category()};
};

category_registry& registry() {
  static category_registry r;
  return r;
}

}  // namespace

const std::error_category& actor_category() noexcept {
  static const actor_error_category category;
  return category;
}

void register_caf_error_category(const std::error_category& category) {
  auto& reg = registry();
  const std::lock_guard lock{reg.mutex};
  if (std::find(reg.categories.begin(), reg.categories.end(), &category) == reg.categories.end()) {
    reg.categories.push_back(&category);
  }
}

caf::error to_caf_error(std::error_code ec, std::string detail) {
  const auto code = ec.value() > 0 && ec.value() < overflow_code
                        ? static_cast<std::uint8_t>(ec.value())
                        : overflow_code;
  return caf::error{code, vessel_atom(),
                    caf::make_message(std::string{ec.category().name()},
                                      static_cast<std::int32_t>(ec.value()), std::move(detail))};
}

std::error_code from_caf_error(const caf::error& e) noexcept {
  if (!e) return {};
  const auto& ctx = e.context();
  if (e.category() == vessel_atom() &&
      ctx.match_elements<std::string, std::int32_t, std::string>()) {
    const auto& name = ctx.get_as<std::string>(0);
    const int value = ctx.get_as<std::int32_t>(1);
    auto& reg = registry();
    const std::lock_guard lock{reg.mutex};
    for (const std::error_category* cat : reg.categories) {
      if (name == cat->name()) return {value, *cat};
    }
  }
  return actor_errc::unhandled_exception;
}

std::string caf_error_detail(const caf::error& e) {
  const auto& ctx = e.context();
  if (ctx.match_elements<std::string, std::int32_t, std::string>()) {
    return ctx.get_as<std::string>(2);
  }
  if (ctx.match_elements<std::string>()) return ctx.get_as<std::string>(0);
  return {};
}

std::string describe(const caf::error& e) {
  if (!e) return "no error";
  if (e.category() == vessel_atom()) {
    const auto ec = from_caf_error(e);
    std::string line = std::string{ec.category().name()} + "/" + ec.message();
    if (auto detail = caf_error_detail(e); !detail.empty()) line += ": " + detail;
    return line;
  }
  return caf::to_string(e);
}

caf::error exception_to_caf_error(const std::exception_ptr& ex) {
  try {
    if (ex) std::rethrow_exception(ex);
  } catch (const std::exception& caught) {
    return to_caf_error(actor_errc::unhandled_exception, caught.what());
  } catch (...) {
    return to_caf_error(actor_errc::unhandled_exception,
                        "an exception that is not a std::exception");
  }
  return to_caf_error(actor_errc::unhandled_exception, "an empty exception_ptr");
}

}  // namespace vessel::actors
