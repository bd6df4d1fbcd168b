/* The serial frame `0xAA | len (0..253) | payload | crc8` (CRC-8/SMBUS over len and payload) and
 * its streaming parser. The C twin of wire/serial_frame.hpp and wire/serial_decoder.hpp: the parser
 * resynchronises exactly as the host decoder does (a failed candidate loses only its start byte;
 * len 254/255 rejected at once; a candidate that spans a silence longer than the read timeout is
 * truncated), so that, fed the same bytes at the same times, both deliver the same frames and count
 * the same errors (tests/unit/bridges/board_frame_test.cpp checks it). */
#ifndef VSL_FRAME_H
#define VSL_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VSL_START_BYTE 0xAAu            /**< first byte of every frame */
#define VSL_MAX_PAYLOAD 253u             /**< largest payload: 254/255 are invalid lengths */
#define VSL_FRAME_OVERHEAD 3u            /**< start byte, len byte, CRC byte */
#define VSL_MAX_FRAME_BYTES 256u         /**< largest frame on the line */
#define VSL_BITS_PER_CHAR_8N1 10u        /**< start + 8 data + stop */
#define VSL_TIMEOUT_FLOOR_MS 20u         /**< as wire::serial_timeout_floor: USB-serial latency etc. */
#define VSL_TIMEOUT_SAFETY_FACTOR 2u     /**< as wire::serial_timeout_safety_factor */

/** Writes the frame carrying `len` payload bytes into `out` (capacity `out_cap`) and returns its
 *  size (len + 3); 0 when len > 253 or out_cap is too small (out untouched). `payload` may overlap
 *  `out` (framing in place). */
size_t vsl_frame_encode(const uint8_t *payload, size_t len, uint8_t *out, size_t out_cap);

/** Milliseconds `frame_bytes` characters of `bits_per_char` bits take at `baud`, rounded up. */
uint32_t vsl_frame_time_ms(uint32_t baud, uint32_t bits_per_char, uint32_t frame_bytes);

/** Read timeout of a partial frame: ceil(safety x frame time) + floor, in ms. For 256 bytes:
 *  115200 8N1 -> 65 ms, 9600 8N1 -> 554 ms; never below the host's serial_read_timeout, at most
 *  1 ms above it (the host rounds in ns). */
uint32_t vsl_read_timeout_ms(uint32_t baud, uint32_t bits_per_char, uint32_t frame_bytes);

/** What a parser has seen. Every byte fed is accounted once:
 *  bytes_in == delivered frame bytes + crc_errors + bad_length + truncated + resync_bytes + buffered. */
typedef struct vsl_parser_counters {
  uint32_t frames_ok;    /**< frames delivered by vsl_parser_next */
  uint32_t crc_errors;   /**< candidates whose CRC failed (their start byte dropped) */
  uint32_t bad_length;   /**< candidates with len 254 or 255 (their start byte dropped) */
  uint32_t truncated;    /**< candidates cut short by a silence (their start byte dropped) */
  uint32_t resync_bytes; /**< bytes skipped while hunting for a start byte */
  uint32_t bytes_in;     /**< bytes accepted by vsl_parser_feed */
} vsl_parser_counters;

/** Streaming frame parser. Its window is one largest frame (256 bytes, indexed by a uint8_t that
 *  wraps by itself): the head candidate is always decidable once the window is full, so the window
 *  never needs more. RAM: ~540 bytes. */
typedef struct vsl_parser {
  uint8_t win[VSL_MAX_FRAME_BYTES];
  uint8_t payload[VSL_MAX_PAYLOAD]; /**< the delivered payload, made contiguous */
  uint16_t count;                   /**< bytes buffered in win */
  uint16_t stale;  /**< buffered bytes at the head that arrived before the latest silence */
  uint8_t head;    /**< win index of the oldest buffered byte */
  uint32_t timeout_ms;
  uint32_t last_rx_ms;
  vsl_parser_counters counters;
} vsl_parser;

/** Resets `p` with a read timeout of `timeout_ms` (e.g. vsl_read_timeout_ms(baud, 10, 256)). */
void vsl_parser_init(vsl_parser *p, uint32_t timeout_ms);

/** Appends as many of `n` bytes as there is room for (received at `now_ms`) and returns how many.
 *  Fewer than n means: drain vsl_parser_next, then feed the rest. If the line was silent longer
 *  than the timeout before now_ms, the bytes already buffered are marked stale first. */
size_t vsl_parser_feed(vsl_parser *p, const uint8_t *bytes, size_t n, uint32_t now_ms);

/** Length of the next complete checked frame's payload (0..253) with `*payload` pointing at it
 *  (valid until the next call), or -1 when the buffered bytes hold none yet. */
int vsl_parser_next(vsl_parser *p, const uint8_t **payload);

/** Lets time pass: truncates the partial frame waited for if no byte came for longer than the
 *  timeout before now_ms. Returns how many candidates it truncated. */
uint32_t vsl_parser_poll(vsl_parser *p, uint32_t now_ms);

/** Bytes buffered, neither delivered nor discarded. */
static inline size_t vsl_parser_buffered(const vsl_parser *p) { return p->count; }

#ifdef __cplusplus
}
#endif

#endif /* VSL_FRAME_H */
