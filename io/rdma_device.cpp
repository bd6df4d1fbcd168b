#include "io/rdma_device.hpp"

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "io/errc.hpp"

namespace vessel::io {
namespace {

std::error_code verbs_error(int err) noexcept {
  return {err != 0 ? err : EIO, std::generic_category()};
}

// Owns the array ibv_get_device_list returns.
struct device_list {
  device_list() noexcept : devices(::ibv_get_device_list(&count)) {}
  ~device_list() {
    if (devices != nullptr) ::ibv_free_device_list(devices);
  }
  device_list(const device_list&) = delete;
  device_list& operator=(const device_list&) = delete;
  int count = 0;
  ibv_device** devices;
};

}  // namespace

bool rdma_devices_present() noexcept {
  std::error_code ec;
  std::filesystem::directory_iterator it{"/sys/class/infiniband", ec};
  return !ec && it != std::filesystem::directory_iterator{};
}

std::vector<std::string> rdma_device_names() {
  std::vector<std::string> names;
  device_list list;  // NULL (errno ENOSYS) when the kernel has no RDMA support: same as none
  for (int i = 0; list.devices != nullptr && i < list.count; ++i) {
    names.emplace_back(::ibv_get_device_name(list.devices[i]));
  }
  return names;
}

result<std::shared_ptr<rdma_device>> rdma_device::open(const rdma_device_config& config) {
  device_list list;
  if (list.devices == nullptr || list.count == 0) return errc::no_device;
  ibv_device* chosen = nullptr;
  for (int i = 0; i < list.count; ++i) {
    if (config.name.empty() || config.name == ::ibv_get_device_name(list.devices[i])) {
      chosen = list.devices[i];
      break;
    }
  }
  if (chosen == nullptr) return errc::no_device;

  std::shared_ptr<rdma_device> dev{new rdma_device()};
  dev->config_ = config;
  dev->name_ = ::ibv_get_device_name(chosen);
  dev->context_ = ::ibv_open_device(chosen);
  if (dev->context_ == nullptr) return verbs_error(errno);
  dev->pd_ = ::ibv_alloc_pd(dev->context_);
  if (dev->pd_ == nullptr) return verbs_error(errno);
  if (int rc = ::ibv_query_port(dev->context_, config.port, &dev->port_attr_); rc != 0) {
    return verbs_error(rc);
  }
  // A port that is not ACTIVE (cable out, subnet manager not yet done) cannot carry an RC QP.
  if (dev->port_attr_.state != IBV_PORT_ACTIVE) return std::make_error_code(std::errc::network_down);
  if (int rc = ::ibv_query_gid(dev->context_, config.port, config.gid_index, &dev->gid_); rc != 0) {
    return verbs_error(rc);
  }
  return dev;
}

rdma_device::~rdma_device() {
  if (pd_ != nullptr) ::ibv_dealloc_pd(pd_);
  if (context_ != nullptr) ::ibv_close_device(context_);
}

}  // namespace vessel::io
