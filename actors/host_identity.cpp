#include "actors/host_identity.hpp"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <climits>
#include <fstream>
#include <system_error>

#include "actors/errc.hpp"

namespace vessel::actors {
namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

std::string host_identity::key() const {
  return hostname + "/" + boot_id;
}

host_identity host_identity::from_key(std::string_view key) {
  const auto slash = key.find('/');
  if (slash == std::string_view::npos) return host_identity{std::string{key}, {}};
  return host_identity{std::string{key.substr(0, slash)}, std::string{key.substr(slash + 1)}};
}

detailed_result<host_identity> local_host_identity(std::string_view boot_id_path) {
  std::array<char, HOST_NAME_MAX + 1> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) {
    const std::error_code ec{errno, std::generic_category()};
    return fail(errc::host_identity_unavailable, "gethostname failed: " + ec.message());
  }
  host_identity id;
  id.hostname = name.data();
  std::ifstream in{std::string{boot_id_path}};
  if (in) {
    std::string line;
    std::getline(in, line);
    id.boot_id = trim(std::move(line));
  }
  return id;
}

bool same_host(const host_identity& a, const host_identity& b) noexcept {
  return !a.boot_id.empty() && !b.boot_id.empty() && a == b;
}

std::string_view to_string(transport_kind kind) noexcept {
  switch (kind) {
    case transport_kind::tcp: return "tcp";
    case transport_kind::shm: return "shm";
    case transport_kind::rdma: return "rdma";
  }
  return "?";
}

detailed_result<transport_override> read_transport_override(const env_view& env) {
  const auto value = env.get("VESSEL_TRANSPORT");
  if (!value || value->empty() || *value == "auto") return transport_override::automatic;
  if (*value == "tcp") return transport_override::tcp;
  if (*value == "shm") return transport_override::shm;
  if (*value == "rdma") return transport_override::rdma;
  return fail(errc::bad_transport_override,
              "VESSEL_TRANSPORT='" + *value + "' is not one of auto, tcp, shm, rdma");
}

detailed_result<transport_choice> choose_transport(const host_identity& self,
                                                   const host_identity& peer,
                                                   transport_override override_choice,
                                                   bool rdma_configured) {
  const bool local = same_host(self, peer);
  const std::string where =
      local ? "same host " + self.key() : "peer host " + peer.key() + " != " + self.key();
  switch (override_choice) {
    case transport_override::tcp:
      return transport_choice{transport_kind::tcp, where + ": tcp (VESSEL_TRANSPORT=tcp)"};
    case transport_override::shm:
      if (!local) {
        return fail(errc::transport_unavailable,
                    "VESSEL_TRANSPORT=shm but the peer is on another host (" + where + ")");
      }
      return transport_choice{transport_kind::shm, where + ": shm (VESSEL_TRANSPORT=shm)"};
    case transport_override::rdma:
      if (!rdma_configured) {
        return fail(errc::transport_unavailable,
                    "VESSEL_TRANSPORT=rdma but RDMA is not configured (no verbs device, or vessel "
                    "built without rdma-core)");
      }
      return transport_choice{transport_kind::rdma, where + ": rdma (VESSEL_TRANSPORT=rdma)"};
    case transport_override::automatic: break;
  }
  if (local) return transport_choice{transport_kind::shm, where + ": shm"};
  if (rdma_configured) return transport_choice{transport_kind::rdma, where + ": rdma"};
  return transport_choice{transport_kind::tcp, where + ": tcp"};
}

}  // namespace vessel::actors
