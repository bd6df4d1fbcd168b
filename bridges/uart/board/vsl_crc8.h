/* CRC-8/SMBUS (poly 0x07, init 0x00, no reflection, xorout 0x00; check("123456789") = 0xF4): the
 * checksum of the serial frame `0xAA | len | payload | crc8`, over len and payload. The C twin of
 * wire/crc8.hpp; the board tests check both give the same value on random data. */
#ifndef VSL_CRC8_H
#define VSL_CRC8_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** CRC-8/SMBUS value before any byte (its init). */
#define VSL_CRC8_INIT 0x00u

/** Extends `crc` over `n` bytes at `bytes` (chainable: feed a message in any number of pieces).
 *  xorout is 0, so the running value is the final value. */
uint8_t vsl_crc8_update(uint8_t crc, const uint8_t *bytes, size_t n);

/** CRC-8/SMBUS of `n` bytes at `bytes` in one piece. */
uint8_t vsl_crc8(const uint8_t *bytes, size_t n);

/** CRC-8/AUTOSAR running value before any byte (init 0xFF). */
#define VSL_CRC8_AUTOSAR_INIT 0xFFu

/** Extends a CRC-8/AUTOSAR running value (poly 0x2F, init 0xFF, no reflection, xorout 0xFF;
 *  check("123456789") = 0xDF) over `n` bytes; the final CRC is the running value ^ 0xFF. The
 *  reliable mode's second check (docs/uart.md): a different polynomial from the frame's, so a
 *  bogus candidate that the frame CRC lets through (1 in 256) is still caught 255 times in 256.
 *  Bitwise, no table: it runs over a few hundred bytes a second. */
uint8_t vsl_crc8_autosar_update(uint8_t crc, const uint8_t *bytes, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* VSL_CRC8_H */
