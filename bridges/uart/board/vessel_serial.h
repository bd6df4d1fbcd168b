/* vessel serial link for board firmware: frames (vsl_frame.h) over a UART whose received bytes an
 * interrupt pushes into a vsl_ring, plus the reliable mode of docs/uart.md (2-byte header
 * [type:2 | seq:6][check], go-back-N with cumulative acks, window VSL_WINDOW, retransmit timeout from the
 * baud rate). Portable freestanding C99: no malloc, no libc beyond <string.h>; one context per
 * UART, used from the main loop only (the ISR touches the ring only). */
#ifndef VESSEL_SERIAL_H
#define VESSEL_SERIAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vsl_crc8.h"
#include "vsl_frame.h"
#include "vsl_ring.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Frames the sender may have unacknowledged (1..8; each costs a 258-byte slot of RAM). */
#ifndef VSL_WINDOW
#define VSL_WINDOW 4
#endif
#if VSL_WINDOW < 1 || VSL_WINDOW > 8
#error "VSL_WINDOW must be 1..8"
#endif

/** First byte of every link payload: type in bits 7..6, sequence number (mod 64) in bits 5..0. The
 *  second byte is the check: CRC-8/AUTOSAR over the first byte and the body (docs/uart.md). */
#define VSL_TYPE_UNRELIABLE 0u /**< datagram: delivered as is, never acked, seq 0 */
#define VSL_TYPE_DATA 1u       /**< reliable data, seq = its sequence number */
#define VSL_TYPE_ACK 2u        /**< cumulative ack, seq = next sequence number expected */
#define VSL_TYPE_SYN 3u        /**< a sender's stream starts: seq, then 1 byte of session id;
                                    with no body: a SYN request from a receiver without state */
#define VSL_SEQ_MOD 64u
#define VSL_HEADER_BYTES 2u
/** Largest payload of vsl_send / vsl_send_unreliable: a frame payload less the header. */
#define VSL_MAX_MESSAGE (VSL_MAX_PAYLOAD - VSL_HEADER_BYTES)
/** Size of an ACK frame on the line: 0xAA, len 2, header, check, CRC. */
#define VSL_ACK_FRAME_BYTES 5u

/** Status of the calls below. */
typedef enum vsl_status {
  VSL_OK = 0,
  VSL_E_TOO_LARGE = -1,   /**< payload above VSL_MAX_MESSAGE */
  VSL_E_WINDOW_FULL = -2, /**< VSL_WINDOW frames await an ack: poll, then try again */
  VSL_E_INVALID = -3      /**< a null pointer or a zero baud in the config */
} vsl_status;

/** Writes `n` bytes to the UART (blocking, or into a TX DMA queue that does not drop). */
typedef void (*vsl_write_fn)(void *user, const uint8_t *bytes, size_t n);
/** Receives one payload; `reliable` tells which send call the peer used. The bytes are valid
 *  during the call only. The callback may call vsl_send. */
typedef void (*vsl_deliver_fn)(void *user, const uint8_t *payload, size_t n, bool reliable);

/** What vsl_init needs. */
typedef struct vsl_config {
  uint32_t baud;          /**< line rate, for the read and retransmit timeouts */
  uint32_t bits_per_char; /**< 10 for 8N1; 0 means 10 */
  vsl_ring *rx;           /**< ring the UART interrupt fills */
  vsl_write_fn write;
  vsl_deliver_fn deliver;
  void *user;      /**< passed to write and deliver */
  uint8_t session; /**< id of this run of the sender: must differ from the previous run's (a counter
                        kept in a backup register, or noise); see docs/uart.md, "Sessions" */
} vsl_config;

/** Counters of the link (the parser's are in ctx->parser.counters). */
typedef struct vsl_stats {
  uint32_t sent_reliable;        /**< vsl_send calls accepted */
  uint32_t sent_unreliable;      /**< vsl_send_unreliable calls accepted */
  uint32_t retransmitted_frames; /**< frames sent again after a timeout */
  uint32_t timeouts;             /**< retransmit timer expiries */
  uint32_t delivered_reliable;   /**< DATA payloads delivered (each exactly once) */
  uint32_t delivered_unreliable;
  uint32_t duplicates;     /**< DATA/SYN seen before: dropped and acked again */
  uint32_t out_of_order;   /**< DATA after a gap: dropped, acked with what is expected */
  uint32_t unsynced_drops; /**< DATA before any SYN of the peer: dropped, a SYN request sent */
  uint32_t syn_requests;   /**< SYN requests of the peer answered with a SYN */
  uint32_t acks_sent;
  uint32_t bad_header; /**< payloads under 2 bytes, SYN without session, acks of unsent frames */
  uint32_t bad_check;  /**< link check failed: a bogus frame the frame CRC let through, dropped */
  uint32_t rx_overruns_seen; /**< ring overruns observed (a copy of rx->overruns at the last poll) */
} vsl_stats;

/** One sent frame kept until acked. */
typedef struct vsl_tx_slot {
  uint16_t len;
  uint8_t bytes[VSL_MAX_FRAME_BYTES];
} vsl_tx_slot;

/** A link context: put it in static storage (about 0.6 KiB + VSL_WINDOW x 258 bytes). */
typedef struct vsl_ctx {
  vsl_config cfg;
  vsl_parser parser;
  vsl_stats stats;
  vsl_tx_slot slot[VSL_WINDOW]; /**< unacked frames, oldest at slot[tx_first] */
  uint32_t now_ms;              /**< time of the latest vsl_poll / vsl_init */
  uint32_t rto_deadline_ms;     /**< when the oldest unacked frame is sent again */
  uint8_t tx_first;             /**< slot index of the oldest unacked frame */
  uint8_t tx_count;             /**< unacked frames */
  uint8_t tx_base;              /**< seq of the oldest unacked frame */
  uint8_t tx_next;              /**< seq of the next frame sent */
  uint8_t rx_expected;          /**< seq of the next DATA to deliver */
  uint8_t rx_session;           /**< session of the peer's stream */
  bool rx_synced;               /**< a SYN of the peer was seen */
  bool syn_acked;               /**< the SYN of vsl_init was acked */
  bool resync_pending;          /**< a SYN answering a SYN request awaits an ack */
} vsl_ctx;

/** Retransmit timeout for a frame of `frame_bytes` bytes, in ms:
 *    ceil(2 x (frame_bytes + VSL_ACK_FRAME_BYTES + VSL_WINDOW x 256) x bits_per_char x 1000 / baud)
 *    + VSL_TIMEOUT_FLOOR_MS
 *  the frame, the ack back, and the up to VSL_WINDOW largest frames the peer may have queued ahead
 *  of its ack, doubled as the read timeout is, plus the 20 ms floor. Window 4, 8N1, 256-byte
 *  frame: 115200 -> 244 ms, 9600 -> 2698 ms. */
uint32_t vsl_rto_ms(uint32_t baud, uint32_t bits_per_char, uint32_t frame_bytes);

/** Initialises `ctx` and sends the SYN that starts this side's reliable stream (it takes one
 *  window slot until acked). VSL_E_INVALID on a null pointer or zero baud. */
vsl_status vsl_init(vsl_ctx *ctx, const vsl_config *cfg, uint32_t now_ms);

/** Main loop: drains the RX ring through the parser, delivers payloads, sends acks, retransmits
 *  on timeout. `now_ms` is a free-running millisecond clock (wraps at 2^32). */
void vsl_poll(vsl_ctx *ctx, uint32_t now_ms);

/** Sends `n` bytes reliably (delivered exactly once, in order, or retried forever). */
vsl_status vsl_send(vsl_ctx *ctx, const uint8_t *payload, size_t n);

/** Sends `n` bytes once, without ack (lost on a bad line). */
vsl_status vsl_send_unreliable(vsl_ctx *ctx, const uint8_t *payload, size_t n);

/** Frames that may still be sent reliably before the window is full. */
static inline uint32_t vsl_send_room(const vsl_ctx *ctx) {
  return (uint32_t)VSL_WINDOW - ctx->tx_count;
}

#ifdef __cplusplus
}
#endif

#endif /* VESSEL_SERIAL_H */
