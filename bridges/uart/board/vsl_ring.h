/* Byte ring buffer between one producer in an interrupt (UART RX ISR or DMA/IDLE handler) and one
 * consumer in the main loop. No lock, no malloc, no disabled interrupts: each side writes only its
 * own index, and the byte store is published by a release store of the producer's index. */
#ifndef VSL_RING_H
#define VSL_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Index accesses that order the byte stores around them. GCC and clang (arm-none-eabi-gcc
 * included) have the __atomic builtins: on Cortex-M3 an aligned 32-bit load/store is atomic and
 * acquire/release add one DMB; on the host they are what ThreadSanitizer understands. Another
 * compiler gets volatile accesses plus VSL_MEMORY_BARRIER(), which its port must define (on a
 * single-core MCU a compiler barrier is enough, since the ISR sees the core's own program order). */
#if defined(__GNUC__) || defined(__clang__)
#define VSL_LOAD_ACQUIRE(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define VSL_STORE_RELEASE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#else
#ifndef VSL_MEMORY_BARRIER
#error "vsl_ring: define VSL_MEMORY_BARRIER() for this compiler"
#endif
#define VSL_LOAD_ACQUIRE(p) vsl_load_acquire_(p)
#define VSL_STORE_RELEASE(p, v) \
  do {                          \
    VSL_MEMORY_BARRIER();       \
    *(volatile uint32_t *)(p) = (v); \
  } while (0)
static inline uint32_t vsl_load_acquire_(const uint32_t *p) {
  uint32_t v = *(const volatile uint32_t *)p;
  VSL_MEMORY_BARRIER();
  return v;
}
#endif

/** A single-producer single-consumer byte ring over caller-provided storage. */
typedef struct vsl_ring {
  uint8_t *buf;      /**< storage, `mask + 1` bytes (a power of two) */
  uint32_t mask;     /**< capacity - 1 */
  uint32_t head;     /**< bytes ever pushed (free-running); written by the producer only */
  uint32_t tail;     /**< bytes ever popped (free-running); written by the consumer only */
  uint32_t overruns; /**< bytes refused because the ring was full; written by the producer only
                        (atomically: the consumer may read it with VSL_LOAD_ACQUIRE) */
} vsl_ring;

/** Sets `ring` over `storage` of `capacity` bytes. False (ring untouched) unless capacity is a
 *  power of two between 2 and 2^31: free-running 32-bit indices then wrap without a gap. */
bool vsl_ring_init(vsl_ring *ring, uint8_t *storage, uint32_t capacity);

/** Producer (ISR): appends one byte; false and overruns + 1 when the ring is full. */
bool vsl_ring_push(vsl_ring *ring, uint8_t byte);

/** Producer (ISR, DMA chunk): appends as many of `n` bytes as fit, returns how many; the rest are
 *  counted in overruns. One index publish per chunk, not per byte. */
size_t vsl_ring_push_many(vsl_ring *ring, const uint8_t *bytes, size_t n);

/** Consumer (main loop): takes one byte into `*out`; false when empty. */
bool vsl_ring_pop(vsl_ring *ring, uint8_t *out);

/** Consumer (main loop): takes up to `n` bytes into `out`, returns how many. */
size_t vsl_ring_pop_many(vsl_ring *ring, uint8_t *out, size_t n);

/** Bytes waiting (exact for the consumer; a lower bound for the producer). */
uint32_t vsl_ring_count(const vsl_ring *ring);

/** Room left (exact for the producer; a lower bound for the consumer). */
uint32_t vsl_ring_free(const vsl_ring *ring);

/** Capacity in bytes. */
static inline uint32_t vsl_ring_capacity(const vsl_ring *ring) { return ring->mask + 1u; }

/** From the UART ISR: the name the board API gives vsl_ring_push. */
static inline bool vsl_rx_push(vsl_ring *ring, uint8_t byte) { return vsl_ring_push(ring, byte); }

/** From a DMA half/full-transfer or IDLE-line interrupt: a received chunk. */
static inline size_t vsl_rx_push_chunk(vsl_ring *ring, const uint8_t *bytes, size_t n) {
  return vsl_ring_push_many(ring, bytes, n);
}

#ifdef __cplusplus
}
#endif

#endif /* VSL_RING_H */
