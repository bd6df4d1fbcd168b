#pragma once
// Which transport reaches a peer: shared memory when both ranks run on the same host (same
// hostname AND same boot id), TCP otherwise, RDMA across hosts when configured. VESSEL_TRANSPORT
// overrides the choice.

#include <string>
#include <string_view>

#include "actors/detailed_error.hpp"
#include "actors/env.hpp"

namespace vessel::actors {

/// Where the Linux kernel publishes a random id generated at every boot.
inline constexpr std::string_view default_boot_id_path = "/proc/sys/kernel/random/boot_id";

/// Identifies one running host. The boot id tells apart two machines (or two containers with
/// their own kernels, e.g. VMs) that share a hostname such as "localhost"; the hostname tells
/// apart containers that share a kernel but not an IPC namespace.
struct host_identity {
  std::string hostname;
  std::string boot_id;  ///< empty when the host does not publish one

  /// "hostname/boot_id": what a rank publishes in the store for its peers.
  std::string key() const;
  /// Inverse of key(); the hostname may not contain '/' (POSIX hostnames cannot).
  static host_identity from_key(std::string_view key);
  bool operator==(const host_identity&) const = default;
};

/// Reads this host's name (gethostname) and boot id (`boot_id_path`; a missing file leaves the
/// boot id empty, which makes every peer look remote: TCP works everywhere, shm does not).
detailed_result<host_identity> local_host_identity(
    std::string_view boot_id_path = default_boot_id_path);

/// True when both identities name the same running host. Without a boot id on either side the
/// answer is false: equal hostnames alone prove nothing (every container may be "localhost").
bool same_host(const host_identity& a, const host_identity& b) noexcept;

/// A link's transport.
enum class transport_kind { tcp, shm, rdma };

/// What VESSEL_TRANSPORT asks for.
enum class transport_override { automatic, tcp, shm, rdma };

/// "tcp", "shm", "rdma".
std::string_view to_string(transport_kind kind) noexcept;

/// Reads VESSEL_TRANSPORT: unset, "" or "auto" → automatic; "tcp", "shm", "rdma"; anything else
/// is errc::bad_transport_override naming the value.
detailed_result<transport_override> read_transport_override(const env_view& env);

/// The chosen transport and why, for the link's start-up log line.
struct transport_choice {
  transport_kind kind = transport_kind::tcp;
  std::string reason;  ///< e.g. "same host node1/8c3e...: shared memory"
};

/// Automatic: shm when same_host(self, peer); else rdma when `rdma_configured`, else tcp. A forced
/// tcp is always possible; a forced shm to another host, or a forced rdma without RDMA configured,
/// is errc::transport_unavailable (silently falling back would hide the misconfiguration).
detailed_result<transport_choice> choose_transport(const host_identity& self,
                                                   const host_identity& peer,
                                                   transport_override override_choice,
                                                   bool rdma_configured = false);

}  // namespace vessel::actors
