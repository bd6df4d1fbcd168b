#pragma once
// The rendezvous store's wire protocol, carried in ordinary vessel data frames whose tag lies in a
// reserved range (store_tag_base + op), so that the Cap'n Proto schema and every codec stay as
// they are. Why not a new schema kind: the store runs once per process at bootstrap, on its own
// connection, and a data header already has what a request needs (the tag says the op,
// message_id pairs a reply with its request); a new union member would have to be mirrored in
// frame_header.hpp, the codec, the interop tests and docs/wire.md for no gain in speed.
//
// Payload, all integers little-endian:
//   request:  u32 key_count | i64 arg | key_count x (u32 len | key bytes) | value bytes
//   response: u32 status    | i64 arg | value bytes
// `arg` is the timeout in milliseconds (get with wait, wait), the delta (add) or, in a response,
// the counter's new value (add). The value is whatever follows the last key.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "io/buffer_pool.hpp"
#include "io/transport.hpp"
#include "wire/frame_header.hpp"
#include "wire/result.hpp"

namespace vessel::actors {

/// The first tag of the store's reserved range; store frames have tag = store_tag_base + op.
inline constexpr std::uint64_t store_tag_base = 0xFFFF'FFFF'5354'0000ull;  // "ST"

/// What a store request asks for.
enum class store_op : std::uint8_t {
  ping = 1,   ///< liveness check; also carries the server's refusal of a surplus client
  set = 2,    ///< store the value under the key (replacing it); wakes waiters
  get = 3,    ///< the key's value; arg > 0: wait up to arg ms for it; arg == 0: not_found at once
  wait = 4,   ///< reply once every key exists, or timeout after arg ms
  add = 5,    ///< key += arg as int64 (absent: 0 + arg); reply arg = new value
  erase = 6,  ///< remove the key; ok whether it existed or not
};

/// A response's outcome.
enum class store_status : std::uint32_t {
  ok = 0,
  not_found = 1,
  timeout = 2,
  too_large = 3,         ///< key, value or key count beyond the server's limits
  store_full = 4,        ///< the store's entry, byte or waiter bound is reached
  not_integer = 5,
  too_many_clients = 6,
  bad_request = 7,
};

/// Bytes of a request's fixed prefix (key_count, arg) and of a response's (status, arg).
inline constexpr std::size_t store_prefix_bytes = 12;

/// A request as decoded on the server; keys and value view the frame's payload.
struct store_request {
  store_op op = store_op::ping;
  std::uint64_t id = 0;
  std::int64_t arg = 0;
  std::vector<std::string_view> keys;  ///< reused across requests: no allocation once grown
  std::span<const std::byte> value;
};

/// A response as decoded on the client.
struct store_response {
  store_op op = store_op::ping;
  std::uint64_t id = 0;
  store_status status = store_status::ok;
  std::int64_t arg = 0;
  std::span<const std::byte> value;
};

/// The data header of a store frame with `payload_len` payload bytes.
wire::frame_header store_header(store_op op, std::uint64_t id, std::size_t payload_len) noexcept;

/// Appends a request's payload to `out` (cleared first).
void encode_store_request(std::vector<std::byte>& out, std::int64_t arg,
                          std::span<const std::string_view> keys,
                          std::span<const std::byte> value);

/// Appends a response's payload to `out` (cleared first).
void encode_store_response(std::vector<std::byte>& out, store_status status, std::int64_t arg,
                           std::span<const std::byte> value);

/// Decodes a request; false when the header is no store request or the payload is malformed
/// (truncated, key lengths past the end, more than `max_keys` keys).
bool decode_store_request(const wire::frame_header& header, std::span<const std::byte> payload,
                          std::size_t max_keys, store_request& out);

/// Decodes a response; false when malformed.
bool decode_store_response(const wire::frame_header& header, std::span<const std::byte> payload,
                           store_response& out);

/// An int64 counter value as stored: 8 bytes little-endian.
void store_int64(std::int64_t v, std::byte (&out)[8]) noexcept;
/// The counter in `value`; false unless it has exactly 8 bytes.
bool load_int64(std::span<const std::byte> value, std::int64_t& out) noexcept;

/// A pool for store frames too large for a transport's copy slot: a few blocks that hold the
/// largest frame `max_key_bytes` and `max_value_bytes` allow, and small ones. Not pre-faulted:
/// the store is a bootstrap service and most of it is never touched.
io::buffer_pool make_store_pool(std::size_t max_key_bytes, std::size_t max_value_bytes);

/// Sends one store frame: copied into the transport's queue when it fits `copy_bytes`, else into
/// a block of `pool` (io::errc::pool_exhausted when none is free). The store runs at bootstrap:
/// the one extra copy buys a simple, bounded send path.
result<void> send_store_frame(io::transport& t, io::buffer_pool& pool, std::size_t copy_bytes,
                              store_op op, std::uint64_t id, std::span<const std::byte> payload);

}  // namespace vessel::actors
