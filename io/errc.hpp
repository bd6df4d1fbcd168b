#pragma once
// Typed errors of the io layer (transports and devices), usable as std::error_code. Raw -errno
// values that have no better name travel as std::errc (std::generic_category()).

#include <system_error>

namespace vessel::io {

/// Why a transport operation failed or a connection ended.
enum class errc {
  connection_closed = 1,  ///< the peer closed the connection in order (EOF).
  connection_reset,       ///< the peer reset the connection (ECONNRESET, EPIPE).
  connection_refused,     ///< nobody listens at the address (ECONNREFUSED).
  connect_timeout,        ///< the connection was not established within its deadline.
  peer_timeout,           ///< the peer stopped responding within its deadline.
  send_queue_full,        ///< the bounded send queue is full: back off until on_writable().
  transport_closed,       ///< the transport was closed locally; nothing more is sent.
  device_unplugged,       ///< the device disappeared (EIO, ENXIO, POLLHUP on a tty).
  bad_frame,              ///< the peer sent bytes the decoder refused (the wire error is logged).
  no_device,              ///< the hardware this transport needs is absent (e.g. no RDMA device).
  handshake_failed,       ///< a transport-level setup exchange failed (e.g. shm segment hand-over).
  pool_exhausted,         ///< no pooled buffer was free: back off and retry.
  unsupported_baud,       ///< the tty driver has no speed constant for the requested baud rate.
  unsupported_serial_format,  ///< data bits, parity or stop bits the tty cannot be set to.
  work_request_failed,    ///< an RDMA work completion carried an error status (the QP is dead).
  not_that_process,       ///< a read of another process's memory reached some other process.
};

const std::error_category& io_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), io_category()}; }

/// Maps a -errno from a socket or tty completion to the closest typed error.
std::error_code error_from_errno(int negative_errno) noexcept;

}  // namespace vessel::io

template <>
struct std::is_error_code_enum<vessel::io::errc> : std::true_type {};
