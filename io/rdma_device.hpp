#pragma once
// An opened RDMA device (verbs context), its protection domain and the port in use: what every
// RDMA transport on that device shares. Built only when libibverbs is present (VESSEL_HAVE_RDMA).

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "wire/result.hpp"

namespace vessel::io {

/// True when the kernel exposes at least one RDMA device (/sys/class/infiniband is not empty).
/// Cheap, and needs no libibverbs provider: what tests check before they try a device.
bool rdma_devices_present() noexcept;

/// The names of the RDMA devices libibverbs sees (e.g. "mlx5_0", "rxe0"); empty when none.
std::vector<std::string> rdma_device_names();

/// How to pick and address a device.
struct rdma_device_config {
  std::string name;      ///< device name; empty: the first device
  std::uint8_t port = 1; ///< HCA port (ports count from 1)
  /// GID table index used as the source address. On RoCE (no LID) a GID is the only address; index
  /// 0 is the link-local one, which works within one L2 segment; routed RoCE v2 needs the index of
  /// an IPv4-mapped GID (see `show_gids`). On InfiniBand it is used only across subnets.
  int gid_index = 0;
};

/// One open device with its protection domain; shared by the transports that use it.
class rdma_device {
 public:
  /// Opens the device named in `config` (or the first), allocates a PD, queries the port.
  /// errc::no_device when there is no device at all or none of that name; the verbs errno
  /// otherwise (e.g. the port is not ACTIVE: std::errc::network_down).
  static result<std::shared_ptr<rdma_device>> open(const rdma_device_config& config = {});

  ~rdma_device();
  rdma_device(const rdma_device&) = delete;
  rdma_device& operator=(const rdma_device&) = delete;

  ibv_context* context() const noexcept { return context_; }
  ibv_pd* pd() const noexcept { return pd_; }
  std::uint8_t port() const noexcept { return config_.port; }
  int gid_index() const noexcept { return config_.gid_index; }
  const ibv_port_attr& port_attr() const noexcept { return port_attr_; }
  const ibv_gid& gid() const noexcept { return gid_; }
  const std::string& name() const noexcept { return name_; }
  /// True on RoCE/iWARP (Ethernet link layer): addressing goes by GID, there is no LID.
  bool is_ethernet() const noexcept { return port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET; }

 private:
  rdma_device() = default;

  rdma_device_config config_;
  std::string name_;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_port_attr port_attr_{};
  ibv_gid gid_{};
};

}  // namespace vessel::io
