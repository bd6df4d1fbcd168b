#pragma once
// Typed errors of the CAF side (supervision, node, rank/link/device actors), and the bridge between
// std::error_code and caf::error. CAF 0.17's caf::error is (uint8 code, category atom, context
// message); vessel errors cross it as code + category "vessel" + context (category name, detail),
// so that an actor's exit reason or a failed request still reads as the vessel error it was.

#include <exception>
#include <string>
#include <system_error>

#include <caf/error.hpp>

namespace vessel::actors {

/// Why a supervised actor, a node or an actor-level request failed.
enum class actor_errc {
  child_escalated = 1,   ///< a supervised child failed more often than its restart budget allows.
  child_start_failed,    ///< a child's factory returned no actor.
  unhandled_exception,   ///< an actor's handler threw; the detail keeps the exception's text.
  peer_lost,             ///< a peer's link actor escalated: the peer is gone for good.
  node_stopped,          ///< the node is shutting down: the request was not carried out.
  no_such_child,         ///< a supervisor was asked for a child name it does not supervise.
  device_timeout,        ///< a device did not answer a call within its timeout.
  device_busy,           ///< a device's request queue is full: retry later.
  receive_timeout,       ///< no message matching a receive arrived within its timeout.
  send_pushed_back,      ///< too many sends already wait for the link to that rank: retry later.
};

const std::error_category& actor_category() noexcept;

inline std::error_code make_error_code(actor_errc e) noexcept {
  return {static_cast<int>(e), actor_category()};
}

/// The CAF category atom that marks a caf::error carrying a vessel std::error_code.
inline constexpr const char* caf_error_category_name = "vessel";

/// `ec` as a caf::error: code, category "vessel", context (category name, detail). A code above
/// 255 does not fit CAF 0.17's uint8 code and travels in the context only (code 255).
caf::error to_caf_error(std::error_code ec, std::string detail = {});

/// Lets from_caf_error map errors of `category` back (io, wire, actors, actor and the std
/// categories are known already). Thread-safe; `category` must live for the whole program.
void register_caf_error_category(const std::error_category& category);

/// The vessel error `e` carries, when it was made by to_caf_error with a registered category;
/// otherwise actor_errc::unhandled_exception for a CAF runtime
/// error with a text, and a default-constructed code for no error.
std::error_code from_caf_error(const caf::error& e) noexcept;

/// The detail string of a caf::error made by to_caf_error or exception_to_caf_error (empty when
/// it has none).
std::string caf_error_detail(const caf::error& e);

/// One line for a log or a test failure: "vessel.actors/child_escalated: <detail>" for vessel
/// errors, CAF's own rendering otherwise.
std::string describe(const caf::error& e);

/// Maps an exception to actor_errc::unhandled_exception keeping what() (CAF 0.17's default
/// handler drops the text: the exit reason would read only "runtime_error").
caf::error exception_to_caf_error(const std::exception_ptr& ex);

}  // namespace vessel::actors

template <>
struct std::is_error_code_enum<vessel::actors::actor_errc> : std::true_type {};
