#include "vsl_ring.h"

#include <string.h>

bool vsl_ring_init(vsl_ring *ring, uint8_t *storage, uint32_t capacity) {
  if (ring == NULL || storage == NULL || capacity < 2u || capacity > 0x80000000u) return false;
  if ((capacity & (capacity - 1u)) != 0u) return false;
  ring->buf = storage;
  ring->mask = capacity - 1u;
  ring->head = 0;
  ring->tail = 0;
  ring->overruns = 0;
  return true;
}

bool vsl_ring_push(vsl_ring *ring, uint8_t byte) {
  const uint32_t head = ring->head; /* our own index: no other writer */
  const uint32_t tail = VSL_LOAD_ACQUIRE(&ring->tail);
  if (head - tail > ring->mask) {
    /* Atomic store: the consumer may read the counter (vsl_poll copies it into its stats). */
    VSL_STORE_RELEASE(&ring->overruns, ring->overruns + 1u);
    return false;
  }
  ring->buf[head & ring->mask] = byte;
  VSL_STORE_RELEASE(&ring->head, head + 1u); /* publishes the byte stored above */
  return true;
}

size_t vsl_ring_push_many(vsl_ring *ring, const uint8_t *bytes, size_t n) {
  const uint32_t head = ring->head;
  const uint32_t tail = VSL_LOAD_ACQUIRE(&ring->tail);
  const uint32_t room = ring->mask + 1u - (head - tail);
  const uint32_t take = n < room ? (uint32_t)n : room;
  const uint32_t at = head & ring->mask;
  const uint32_t first = take < ring->mask + 1u - at ? take : ring->mask + 1u - at;
  if (first != 0u) memcpy(ring->buf + at, bytes, first);
  if (take > first) memcpy(ring->buf, bytes + first, take - first);
  if (take != n) VSL_STORE_RELEASE(&ring->overruns, ring->overruns + (uint32_t)(n - take));
  VSL_STORE_RELEASE(&ring->head, head + take);
  return take;
}

bool vsl_ring_pop(vsl_ring *ring, uint8_t *out) {
  const uint32_t tail = ring->tail;
  const uint32_t head = VSL_LOAD_ACQUIRE(&ring->head); /* acquires the bytes before head */
  if (head == tail) return false;
  *out = ring->buf[tail & ring->mask];
  VSL_STORE_RELEASE(&ring->tail, tail + 1u); /* the slot is free only after the read above */
  return true;
}

size_t vsl_ring_pop_many(vsl_ring *ring, uint8_t *out, size_t n) {
  const uint32_t tail = ring->tail;
  const uint32_t head = VSL_LOAD_ACQUIRE(&ring->head);
  const uint32_t avail = head - tail;
  const uint32_t take = n < avail ? (uint32_t)n : avail;
  const uint32_t at = tail & ring->mask;
  const uint32_t first = take < ring->mask + 1u - at ? take : ring->mask + 1u - at;
  if (first != 0u) memcpy(out, ring->buf + at, first);
  if (take > first) memcpy(out + first, ring->buf, take - first);
  VSL_STORE_RELEASE(&ring->tail, tail + take);
  return take;
}

uint32_t vsl_ring_count(const vsl_ring *ring) {
  return VSL_LOAD_ACQUIRE(&ring->head) - VSL_LOAD_ACQUIRE(&ring->tail);
}

uint32_t vsl_ring_free(const vsl_ring *ring) { return ring->mask + 1u - vsl_ring_count(ring); }
