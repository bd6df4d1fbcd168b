#include "io/uring_features.hpp"

#include <liburing.h>

namespace vessel::io {

uring_features uring_features::all() noexcept {
  uring_features f;
  f.single_issuer = f.coop_taskrun = f.defer_taskrun = f.ext_arg = f.cancel_any = f.multishot_accept = true;
  f.buffer_ring = f.multishot_recv = f.send_zc = f.sendmsg_zc = true;
  f.registered_buffers = f.registered_files = true;
  return f;
}

uring_features operator&(const uring_features& a, const uring_features& b) noexcept {
  uring_features f;
  f.single_issuer = a.single_issuer && b.single_issuer;
  f.coop_taskrun = a.coop_taskrun && b.coop_taskrun;
  f.defer_taskrun = a.defer_taskrun && b.defer_taskrun;
  f.ext_arg = a.ext_arg && b.ext_arg;
  f.cancel_any = a.cancel_any && b.cancel_any;
  f.multishot_accept = a.multishot_accept && b.multishot_accept;
  f.buffer_ring = a.buffer_ring && b.buffer_ring;
  f.multishot_recv = a.multishot_recv && b.multishot_recv;
  f.send_zc = a.send_zc && b.send_zc;
  f.sendmsg_zc = a.sendmsg_zc && b.sendmsg_zc;
  f.registered_buffers = a.registered_buffers && b.registered_buffers;
  f.registered_files = a.registered_files && b.registered_files;
  return f;
}

std::string uring_features::to_string() const {
  std::string s;
  auto add = [&s](const char* name, bool on) {
    if (!s.empty()) s += ' ';
    s += name;
    s += on ? "=1" : "=0";
  };
  add("single_issuer", single_issuer);
  add("coop_taskrun", coop_taskrun);
  add("defer_taskrun", defer_taskrun);
  add("ext_arg", ext_arg);
  add("cancel_any", cancel_any);
  add("multishot_accept", multishot_accept);
  add("buffer_ring", buffer_ring);
  add("multishot_recv", multishot_recv);
  add("send_zc", send_zc);
  add("sendmsg_zc", sendmsg_zc);
  add("registered_buffers", registered_buffers);
  add("registered_files", registered_files);
  return s;
}

uring_features probe_features(io_uring& ring) {
  uring_features f;
  f.single_issuer = (ring.flags & IORING_SETUP_SINGLE_ISSUER) != 0;
  f.coop_taskrun = (ring.flags & IORING_SETUP_COOP_TASKRUN) != 0;
  f.defer_taskrun = (ring.flags & IORING_SETUP_DEFER_TASKRUN) != 0;
  f.ext_arg = (ring.features & IORING_FEAT_EXT_ARG) != 0;

  io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  if (probe == nullptr) return f;  // before 5.6: nothing optional, every fallback
  auto has = [probe](int op) { return io_uring_opcode_supported(probe, op) != 0; };
  // IORING_OP_SOCKET arrived in 5.19 together with multishot accept, CANCEL_ANY and buffer rings,
  // none of which has an opcode of its own to probe.
  const bool v5_19 = has(IORING_OP_SOCKET);
  f.multishot_accept = v5_19;
  f.cancel_any = v5_19;
  f.buffer_ring = v5_19;
  // Multishot recv arrived in 6.0 with SEND_ZC.
  f.send_zc = has(IORING_OP_SEND_ZC);
  f.multishot_recv = f.send_zc && f.buffer_ring;
  f.sendmsg_zc = has(IORING_OP_SENDMSG_ZC);
  f.registered_buffers = has(IORING_OP_READ_FIXED) && has(IORING_OP_WRITE_FIXED);
  // Fixed files predate the probe itself (5.1 vs 5.6), so a working probe implies them.
  f.registered_files = true;
  io_uring_free_probe(probe);
  return f;
}

}  // namespace vessel::io
