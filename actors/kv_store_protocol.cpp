#include "actors/kv_store_protocol.hpp"

#include "io/errc.hpp"

#include <cstring>
#include <optional>
#include <type_traits>
#include <variant>

namespace vessel::actors {
namespace {

template <class T>
void put(std::vector<std::byte>& out, T v) {
  // Little-endian regardless of the host: shift instead of memcpy.
  using U = std::make_unsigned_t<T>;
  auto u = static_cast<U>(v);
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    out.push_back(static_cast<std::byte>(u & 0xFFu));
    u = static_cast<U>(u >> 8);
  }
}

template <class T>
T get_le(const std::byte* p) noexcept {
  using U = std::make_unsigned_t<T>;
  U u = 0;
  for (std::size_t i = sizeof(T); i-- > 0;) u = static_cast<U>((u << 8) | std::to_integer<U>(p[i]));
  return static_cast<T>(u);
}

std::optional<store_op> op_of(const wire::frame_header& h) noexcept {
  const auto* d = std::get_if<wire::data_fields>(&h.body);
  if (d == nullptr || d->tag <= store_tag_base || d->tag > store_tag_base + 6) return std::nullopt;
  return static_cast<store_op>(d->tag - store_tag_base);
}

std::uint64_t id_of(const wire::frame_header& h) noexcept {
  return std::get<wire::data_fields>(h.body).message_id;
}

}  // namespace

wire::frame_header store_header(store_op op, std::uint64_t id, std::size_t payload_len) noexcept {
  wire::frame_header h;
  h.payload_len = static_cast<std::uint32_t>(payload_len);
  wire::data_fields d;
  d.tag = store_tag_base + static_cast<std::uint64_t>(op);
  d.message_id = id;
  d.total_len = payload_len;
  h.body = d;
  return h;
}

void encode_store_request(std::vector<std::byte>& out, std::int64_t arg,
                          std::span<const std::string_view> keys,
                          std::span<const std::byte> value) {
  out.clear();
  put<std::uint32_t>(out, static_cast<std::uint32_t>(keys.size()));
  put<std::int64_t>(out, arg);
  for (auto k : keys) {
    put<std::uint32_t>(out, static_cast<std::uint32_t>(k.size()));
    const auto* b = reinterpret_cast<const std::byte*>(k.data());
    out.insert(out.end(), b, b + k.size());
  }
  out.insert(out.end(), value.begin(), value.end());
}

void encode_store_response(std::vector<std::byte>& out, store_status status, std::int64_t arg,
                           std::span<const std::byte> value) {
  out.clear();
  put<std::uint32_t>(out, static_cast<std::uint32_t>(status));
  put<std::int64_t>(out, arg);
  out.insert(out.end(), value.begin(), value.end());
}

bool decode_store_request(const wire::frame_header& header, std::span<const std::byte> payload,
                          std::size_t max_keys, store_request& out) {
  const auto op = op_of(header);
  if (!op || payload.size() < store_prefix_bytes) return false;
  out.op = *op;
  out.id = id_of(header);
  const auto count = get_le<std::uint32_t>(payload.data());
  out.arg = get_le<std::int64_t>(payload.data() + 4);
  if (count > max_keys) return false;
  out.keys.clear();
  std::size_t at = store_prefix_bytes;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (payload.size() - at < 4) return false;
    const auto len = get_le<std::uint32_t>(payload.data() + at);
    at += 4;
    if (payload.size() - at < len) return false;
    out.keys.emplace_back(reinterpret_cast<const char*>(payload.data() + at), len);
    at += len;
  }
  out.value = payload.subspan(at);
  return true;
}

bool decode_store_response(const wire::frame_header& header, std::span<const std::byte> payload,
                           store_response& out) {
  const auto op = op_of(header);
  if (!op || payload.size() < store_prefix_bytes) return false;
  out.op = *op;
  out.id = id_of(header);
  out.status = static_cast<store_status>(get_le<std::uint32_t>(payload.data()));
  out.arg = get_le<std::int64_t>(payload.data() + 4);
  out.value = payload.subspan(store_prefix_bytes);
  return true;
}

void store_int64(std::int64_t v, std::byte (&out)[8]) noexcept {
  auto u = static_cast<std::uint64_t>(v);
  for (auto& b : out) {
    b = static_cast<std::byte>(u & 0xFFu);
    u >>= 8;
  }
}

bool load_int64(std::span<const std::byte> value, std::int64_t& out) noexcept {
  if (value.size() != 8) return false;
  out = get_le<std::int64_t>(value.data());
  return true;
}

io::buffer_pool make_store_pool(std::size_t max_key_bytes, std::size_t max_value_bytes) {
  io::buffer_pool_config config;
  config.populate = false;
  const std::size_t largest = (max_key_bytes + max_value_bytes + 64 + store_prefix_bytes + 63) / 64 * 64;
  config.classes.push_back({4096, 32});
  if (largest > 4096) config.classes.push_back({largest, 8});
  return io::buffer_pool{config};
}

result<void> send_store_frame(io::transport& t, io::buffer_pool& pool, std::size_t copy_bytes,
                              store_op op, std::uint64_t id, std::span<const std::byte> payload) {
  const auto header = store_header(op, id, payload.size());
  if (payload.size() <= copy_bytes) return t.send_copy(header, payload);
  io::buffer block = pool.try_acquire(payload.size());
  if (!block) return io::make_error_code(io::errc::pool_exhausted);
  std::memcpy(block.data(), payload.data(), payload.size());
  return t.send(header, std::move(block).slice(0, payload.size()));
}

}  // namespace vessel::actors
