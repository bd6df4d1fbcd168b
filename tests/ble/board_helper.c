/* An emulated BLE board that runs the board library itself (bridges/uart/board, C99) behind the
 * BlueZ emulation's Nordic UART Service (tests/ble/bluez_gatt.py, parameter "board"): stdin is the
 * board's UART RX (what the host writes to the RX characteristic), stdout its UART TX (what the
 * emulation notifies on TX, cut to the link's payload size). The application echoes: every
 * reliable message comes back reliably, every unreliable one unreliably. Exits on EOF of stdin.
 * argv[1]: the baud the retransmit timeout derives from (default 1000000: ~50 ms). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bridges/uart/board/vessel_serial.h"

enum { backlog_slots = 1024 };

typedef struct message {
  uint16_t len;
  uint8_t bytes[VSL_MAX_MESSAGE];
} message;

static uint8_t rx_storage[8192];
static vsl_ring rx;
static vsl_ctx link_ctx;
static message backlog[backlog_slots]; /* echoes waiting for window room, oldest at first */
static size_t backlog_first, backlog_count, backlog_overflows;

static uint32_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint32_t)((uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u);
}

static void write_all(void *user, const uint8_t *bytes, size_t n) {
  (void)user;
  while (n > 0) {
    const ssize_t w = write(STDOUT_FILENO, bytes, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) exit(0); /* the emulation is gone */
    bytes += (size_t)w;
    n -= (size_t)w;
  }
}

static void deliver(void *user, const uint8_t *payload, size_t n, bool reliable) {
  (void)user;
  if (!reliable) {
    vsl_send_unreliable(&link_ctx, payload, n);
    return;
  }
  if (backlog_count == backlog_slots) {
    ++backlog_overflows;
    return;
  }
  message *m = &backlog[(backlog_first + backlog_count) % backlog_slots];
  m->len = (uint16_t)n;
  memcpy(m->bytes, payload, n);
  ++backlog_count;
}

static void drain_backlog(void) {
  while (backlog_count > 0 && vsl_send_room(&link_ctx) > 0) {
    const message *m = &backlog[backlog_first];
    if (vsl_send(&link_ctx, m->bytes, m->len) != VSL_OK) break;
    backlog_first = (backlog_first + 1) % backlog_slots;
    --backlog_count;
  }
}

int main(int argc, char **argv) {
  const uint32_t baud = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 1000000u;
  vsl_ring_init(&rx, rx_storage, sizeof rx_storage);
  vsl_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.baud = baud;
  cfg.bits_per_char = 10;
  cfg.rx = &rx;
  cfg.write = write_all;
  cfg.deliver = deliver;
  cfg.session = (uint8_t)(getpid() ^ now_ms());
  if (vsl_init(&link_ctx, &cfg, now_ms()) != VSL_OK) return 2;
  uint8_t buf[512];
  for (;;) {
    struct pollfd p = {STDIN_FILENO, POLLIN, 0};
    const int r = poll(&p, 1, 5); /* the retransmit timer needs polls while the host is silent */
    if (r < 0 && errno != EINTR) return 1;
    const size_t room = vsl_ring_free(&rx) < sizeof buf ? vsl_ring_free(&rx) : sizeof buf;
    if (r > 0 && room > 0) { /* a full ring waits for vsl_poll below to drain it */
      const ssize_t n = read(STDIN_FILENO, buf, room);
      if (n == 0) break;
      if (n < 0 && errno != EINTR && errno != EAGAIN) return 1;
      if (n > 0) vsl_rx_push_chunk(&rx, buf, (size_t)n);
    }
    vsl_poll(&link_ctx, now_ms());
    drain_backlog();
  }
  fprintf(stderr, "board: delivered %u reliable, retransmitted %u frames, %zu echoes dropped\n",
          (unsigned)link_ctx.stats.delivered_reliable, (unsigned)link_ctx.stats.retransmitted_frames,
          backlog_overflows);
  return 0;
}
