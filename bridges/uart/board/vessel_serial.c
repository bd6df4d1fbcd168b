#include "vessel_serial.h"

#include <string.h>

/* Sequence numbers are mod 64 and the window at most 8, so a received seq is either the expected
 * one, up to 8 behind it (a duplicate: its ack was lost) or, after a loss, up to 8 ahead: the
 * halves of the circle (32 each) tell them apart with room to spare. */
#define SEQ_MASK (VSL_SEQ_MOD - 1u)
#define HALF_CIRCLE (VSL_SEQ_MOD / 2u)

static uint8_t header(uint32_t type, uint32_t seq) { return (uint8_t)((type << 6) | (seq & SEQ_MASK)); }

/* The link check of a payload whose header byte is `h` and body `body`. */
static uint8_t link_check(uint8_t h, const uint8_t *body, size_t n) {
  const uint8_t crc = vsl_crc8_autosar_update(VSL_CRC8_AUTOSAR_INIT, &h, 1);
  return (uint8_t)(vsl_crc8_autosar_update(crc, body, n) ^ 0xFFu);
}

/* Frames header + check + `n` body bytes already at out[4] into out; returns the frame size. */
static size_t frame_link_payload(uint8_t *out, size_t out_cap, uint8_t h, size_t n) {
  out[2] = h;
  out[3] = link_check(h, out + 4, n);
  return vsl_frame_encode(out + 2, n + VSL_HEADER_BYTES, out, out_cap);
}

uint32_t vsl_rto_ms(uint32_t baud, uint32_t bits_per_char, uint32_t frame_bytes) {
  const uint32_t bytes = frame_bytes + VSL_ACK_FRAME_BYTES + (uint32_t)VSL_WINDOW * VSL_MAX_FRAME_BYTES;
  return vsl_frame_time_ms(baud, bits_per_char, bytes * VSL_TIMEOUT_SAFETY_FACTOR) + VSL_TIMEOUT_FLOOR_MS;
}

static uint32_t rto_of_oldest(const vsl_ctx *ctx) {
  return vsl_rto_ms(ctx->cfg.baud, ctx->cfg.bits_per_char, ctx->slot[ctx->tx_first].len);
}

/* A SYN outside the window: seq = base - 1, so that a receiver without state expects base. */
static void send_resync(vsl_ctx *ctx) {
  uint8_t frame[VSL_FRAME_OVERHEAD + VSL_HEADER_BYTES + 1u];
  frame[4] = ctx->cfg.session;
  (void)frame_link_payload(frame, sizeof frame, header(VSL_TYPE_SYN, (uint32_t)ctx->tx_base - 1u), 1);
  ctx->cfg.write(ctx->cfg.user, frame, sizeof frame);
}

static void send_syn_request(vsl_ctx *ctx) {
  uint8_t frame[VSL_FRAME_OVERHEAD + VSL_HEADER_BYTES];
  (void)frame_link_payload(frame, sizeof frame, header(VSL_TYPE_SYN, 0), 0);
  ctx->cfg.write(ctx->cfg.user, frame, sizeof frame);
}

static void send_ack(vsl_ctx *ctx) {
  uint8_t frame[VSL_ACK_FRAME_BYTES];
  (void)frame_link_payload(frame, sizeof frame, header(VSL_TYPE_ACK, ctx->rx_expected), 0);
  ctx->cfg.write(ctx->cfg.user, frame, sizeof frame);
  ++ctx->stats.acks_sent;
}

/* Frames `body` behind a header of `type` with the next seq into a free slot, sends it, and arms
 * the retransmit timer if it is the only frame in flight. */
static vsl_status send_windowed(vsl_ctx *ctx, uint32_t type, const uint8_t *body, size_t n) {
  vsl_tx_slot *slot;
  if (n > VSL_MAX_MESSAGE) return VSL_E_TOO_LARGE;
  if (ctx->tx_count >= VSL_WINDOW) return VSL_E_WINDOW_FULL;
  slot = &ctx->slot[(ctx->tx_first + ctx->tx_count) % VSL_WINDOW];
  /* Body first at its final place, then header, check and frame around it in place. */
  if (n != 0u) memcpy(slot->bytes + 4, body, n);
  slot->len = (uint16_t)frame_link_payload(slot->bytes, sizeof slot->bytes, header(type, ctx->tx_next), n);
  ctx->tx_next = (uint8_t)((ctx->tx_next + 1u) & SEQ_MASK);
  if (ctx->tx_count++ == 0u) ctx->rto_deadline_ms = ctx->now_ms + vsl_rto_ms(ctx->cfg.baud, ctx->cfg.bits_per_char, slot->len);
  ctx->cfg.write(ctx->cfg.user, slot->bytes, slot->len);
  return VSL_OK;
}

vsl_status vsl_init(vsl_ctx *ctx, const vsl_config *cfg, uint32_t now_ms) {
  if (ctx == NULL || cfg == NULL || cfg->rx == NULL || cfg->write == NULL || cfg->deliver == NULL ||
      cfg->baud == 0u) {
    return VSL_E_INVALID;
  }
  memset(ctx, 0, sizeof *ctx);
  ctx->cfg = *cfg;
  if (ctx->cfg.bits_per_char == 0u) ctx->cfg.bits_per_char = VSL_BITS_PER_CHAR_8N1;
  ctx->now_ms = now_ms;
  vsl_parser_init(&ctx->parser, vsl_read_timeout_ms(ctx->cfg.baud, ctx->cfg.bits_per_char, VSL_MAX_FRAME_BYTES));
  /* SYN occupies seq 0; the first DATA is seq 1. */
  return send_windowed(ctx, VSL_TYPE_SYN, &ctx->cfg.session, 1);
}

vsl_status vsl_send(vsl_ctx *ctx, const uint8_t *payload, size_t n) {
  const vsl_status st = send_windowed(ctx, VSL_TYPE_DATA, payload, n);
  if (st == VSL_OK) ++ctx->stats.sent_reliable;
  return st;
}

vsl_status vsl_send_unreliable(vsl_ctx *ctx, const uint8_t *payload, size_t n) {
  uint8_t frame[VSL_MAX_FRAME_BYTES];
  size_t size;
  if (n > VSL_MAX_MESSAGE) return VSL_E_TOO_LARGE;
  if (n != 0u) memcpy(frame + 4, payload, n);
  size = frame_link_payload(frame, sizeof frame, header(VSL_TYPE_UNRELIABLE, 0), n);
  ctx->cfg.write(ctx->cfg.user, frame, size);
  ++ctx->stats.sent_unreliable;
  return VSL_OK;
}

/* Cumulative ack: `next` is the seq the peer expects, so every frame before it is delivered. */
static void on_ack(vsl_ctx *ctx, uint32_t next) {
  const uint32_t acked = (next - ctx->tx_base) & SEQ_MASK;
  if (acked > ctx->tx_count) {
    ++ctx->stats.bad_header; /* acks a frame never sent: a stale ack of an earlier session */
    return;
  }
  /* Any ack in range comes from a synced receiver: a resync SYN has been taken. */
  ctx->resync_pending = false;
  if (acked == 0u) return; /* nothing new: a re-ack of a duplicate, or an ack crossing a resend */
  ctx->syn_acked = true;   /* the oldest frame, so the SYN of vsl_init first */
  ctx->tx_first = (uint8_t)((ctx->tx_first + acked) % VSL_WINDOW);
  ctx->tx_count = (uint8_t)(ctx->tx_count - acked);
  ctx->tx_base = (uint8_t)(next & SEQ_MASK);
  /* The oldest frame in flight now gets a full timeout from here: it may have waited in the UART
   * behind the frames just acked. */
  if (ctx->tx_count != 0u) ctx->rto_deadline_ms = ctx->now_ms + rto_of_oldest(ctx);
}

static void on_frame(vsl_ctx *ctx, const uint8_t *p, size_t n) {
  uint32_t type, seq;
  if (n < VSL_HEADER_BYTES) {
    ++ctx->stats.bad_header;
    return;
  }
  if (link_check(p[0], p + 2, n - 2u) != p[1]) {
    ++ctx->stats.bad_check;
    return;
  }
  type = (uint32_t)p[0] >> 6;
  seq = (uint32_t)p[0] & SEQ_MASK;
  switch (type) {
    case VSL_TYPE_UNRELIABLE:
      ++ctx->stats.delivered_unreliable;
      ctx->cfg.deliver(ctx->cfg.user, p + 2, n - 2u, false);
      return;
    case VSL_TYPE_ACK:
      on_ack(ctx, seq);
      return;
    case VSL_TYPE_SYN:
      if (n == 2u) {
        /* The peer's receiver has no state (it restarted): tell it where our stream stands. While
         * the SYN of vsl_init is unacked it is still being resent, and says the same. */
        if (ctx->syn_acked) {
          ++ctx->stats.syn_requests;
          ctx->resync_pending = true;
          send_resync(ctx);
        }
        return;
      }
      if (n != 3u) {
        ++ctx->stats.bad_header;
        return;
      }
      if (!ctx->rx_synced || p[2] != ctx->rx_session) {
        /* A new stream of the peer (first contact, or the peer restarted): expect what follows. */
        ctx->rx_synced = true;
        ctx->rx_session = p[2];
        ctx->rx_expected = (uint8_t)((seq + 1u) & SEQ_MASK);
      } else {
        ++ctx->stats.duplicates; /* our ack of it was lost */
      }
      send_ack(ctx);
      return;
    default: /* VSL_TYPE_DATA */
      break;
  }
  if (!ctx->rx_synced) {
    /* Its SYN was lost (it comes again first, go-back-N), or we restarted: ask for a SYN. */
    ++ctx->stats.unsynced_drops;
    send_syn_request(ctx);
    return;
  }
  {
    const uint32_t ahead = (seq - ctx->rx_expected) & SEQ_MASK;
    if (ahead == 0u) {
      ctx->rx_expected = (uint8_t)((ctx->rx_expected + 1u) & SEQ_MASK);
      send_ack(ctx); /* before delivering: the callback may send, and its frames then follow */
      ++ctx->stats.delivered_reliable;
      ctx->cfg.deliver(ctx->cfg.user, p + 2, n - 2u, true);
      return;
    }
    if (ahead >= HALF_CIRCLE) {
      ++ctx->stats.duplicates;
    } else {
      ++ctx->stats.out_of_order;
    }
    send_ack(ctx); /* either way the peer learns what we expect */
  }
}

static void drain_parser(vsl_ctx *ctx) {
  const uint8_t *payload;
  int n;
  while ((n = vsl_parser_next(&ctx->parser, &payload)) >= 0) on_frame(ctx, payload, (size_t)n);
}

void vsl_poll(vsl_ctx *ctx, uint32_t now_ms) {
  uint8_t chunk[64];
  size_t got;
  ctx->now_ms = now_ms;
  /* Bytes popped now are stamped now: the parser's timeout is far longer than one loop turn. */
  while ((got = vsl_ring_pop_many(ctx->cfg.rx, chunk, sizeof chunk)) != 0u) {
    size_t fed = 0;
    while (fed < got) {
      fed += vsl_parser_feed(&ctx->parser, chunk + fed, got - fed, now_ms);
      drain_parser(ctx);
    }
  }
  if (vsl_parser_poll(&ctx->parser, now_ms) != 0u) drain_parser(ctx);
  ctx->stats.rx_overruns_seen = VSL_LOAD_ACQUIRE(&ctx->cfg.rx->overruns);

  /* Go-back-N: the receiver drops what follows a lost frame, so resend every frame in flight. */
  if (ctx->tx_count != 0u && (int32_t)(now_ms - ctx->rto_deadline_ms) >= 0) {
    uint32_t i;
    ++ctx->stats.timeouts;
    if (ctx->resync_pending) send_resync(ctx);
    for (i = 0; i < ctx->tx_count; ++i) {
      const vsl_tx_slot *slot = &ctx->slot[(ctx->tx_first + i) % VSL_WINDOW];
      ctx->cfg.write(ctx->cfg.user, slot->bytes, slot->len);
      ++ctx->stats.retransmitted_frames;
    }
    ctx->rto_deadline_ms = now_ms + rto_of_oldest(ctx);
  }
}
