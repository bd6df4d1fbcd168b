#include "vsl_frame.h"

#include <string.h>

#include "vsl_crc8.h"

size_t vsl_frame_encode(const uint8_t *payload, size_t len, uint8_t *out, size_t out_cap) {
  uint8_t crc, len_byte;
  if (len > VSL_MAX_PAYLOAD || out_cap < len + VSL_FRAME_OVERHEAD) return 0;
  /* CRC before any write: payload may alias out. */
  len_byte = (uint8_t)len;
  crc = vsl_crc8_update(VSL_CRC8_INIT, &len_byte, 1);
  crc = vsl_crc8_update(crc, payload, len);
  if (len != 0) memmove(out + 2, payload, len);
  out[0] = VSL_START_BYTE;
  out[1] = (uint8_t)len;
  out[2 + len] = crc;
  return len + VSL_FRAME_OVERHEAD;
}

uint32_t vsl_frame_time_ms(uint32_t baud, uint32_t bits_per_char, uint32_t frame_bytes) {
  /* 32-bit arithmetic (no libgcc 64-bit division on the M3): bits x 1000 stays below 2^32 for any
   * frame this library sends (<= 256 x 8 frames x 11 bits x 1000). */
  const uint32_t bits = bits_per_char * frame_bytes;
  if (baud == 0u) return 0xFFFFFFFFu;
  return (bits * 1000u + baud - 1u) / baud;
}

uint32_t vsl_read_timeout_ms(uint32_t baud, uint32_t bits_per_char, uint32_t frame_bytes) {
  return vsl_frame_time_ms(baud, bits_per_char, frame_bytes * VSL_TIMEOUT_SAFETY_FACTOR) +
         VSL_TIMEOUT_FLOOR_MS;
}

void vsl_parser_init(vsl_parser *p, uint32_t timeout_ms) {
  memset(p, 0, sizeof *p);
  p->timeout_ms = timeout_ms;
}

static void note_silence(vsl_parser *p, uint32_t now_ms) {
  if (p->count != 0u && (uint32_t)(now_ms - p->last_rx_ms) > p->timeout_ms) p->stale = p->count;
}

static uint8_t at(const vsl_parser *p, uint32_t offset) {
  return p->win[(uint8_t)(p->head + offset)]; /* the uint8_t index wraps at 256 = window size */
}

static void consume(vsl_parser *p, uint16_t n) {
  p->head = (uint8_t)(p->head + n);
  p->count = (uint16_t)(p->count - n);
  p->stale = p->stale > n ? (uint16_t)(p->stale - n) : 0u;
}

size_t vsl_parser_feed(vsl_parser *p, const uint8_t *bytes, size_t n, uint32_t now_ms) {
  size_t room, i;
  note_silence(p, now_ms);
  room = VSL_MAX_FRAME_BYTES - p->count;
  if (n > room) n = room;
  if (n == 0) return 0;
  for (i = 0; i < n; ++i) p->win[(uint8_t)(p->head + p->count + i)] = bytes[i];
  p->count = (uint16_t)(p->count + n);
  p->counters.bytes_in += (uint32_t)n;
  p->last_rx_ms = now_ms;
  return n;
}

/* Discards what cannot start a frame until the head is a complete valid frame (returns its
 * payload length) or the buffered bytes cannot be decided yet (-1). Mirrors
 * wire::serial_decoder::advance step for step. */
static int advance(vsl_parser *p) {
  for (;;) {
    uint32_t len, size, i;
    uint8_t crc;
    bool stale;
    if (p->count == 0u) return -1;
    if (at(p, 0) != VSL_START_BYTE) {
      ++p->counters.resync_bytes;
      consume(p, 1);
      continue;
    }
    /* A candidate starts at the head; any failure drops its start byte only, so a frame starting
     * at any later byte of it is still found. */
    stale = p->stale != 0u;
    if (p->count < 2u) {
      if (!stale) return -1;
      ++p->counters.truncated;
      consume(p, 1);
      continue;
    }
    len = at(p, 1);
    if (len > VSL_MAX_PAYLOAD) {
      ++p->counters.bad_length;
      consume(p, 1);
      continue;
    }
    size = len + VSL_FRAME_OVERHEAD;
    if (stale && (p->count < size || size > p->stale)) {
      ++p->counters.truncated; /* its bytes stopped, or resumed only after the silence */
      consume(p, 1);
      continue;
    }
    if (p->count < size) return -1;
    crc = VSL_CRC8_INIT;
    for (i = 1; i < size - 1u; ++i) crc = vsl_crc8_update(crc, &p->win[(uint8_t)(p->head + i)], 1);
    if (crc == at(p, size - 1u)) return (int)len;
    ++p->counters.crc_errors;
    consume(p, 1);
  }
}

int vsl_parser_next(vsl_parser *p, const uint8_t **payload) {
  const int len = advance(p);
  uint32_t i;
  if (len < 0) return -1;
  for (i = 0; i < (uint32_t)len; ++i) p->payload[i] = at(p, 2u + i);
  consume(p, (uint16_t)(len + (int)VSL_FRAME_OVERHEAD));
  ++p->counters.frames_ok;
  *payload = p->payload;
  return len;
}

uint32_t vsl_parser_poll(vsl_parser *p, uint32_t now_ms) {
  const uint32_t before = p->counters.truncated;
  note_silence(p, now_ms);
  (void)advance(p);
  return p->counters.truncated - before;
}
