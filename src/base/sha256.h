/* base/sha256.h — SHA-256 (FIPS 180-4), incremental: the Hub names an LFS file by the sha256 of its
 * bytes (its ETag), and hub_pull verifies every downloaded LFS blob against it. */
#ifndef HEARTH_BASE_SHA256_H
#define HEARTH_BASE_SHA256_H
#include <stddef.h>
#include <stdint.h>

struct sha256 {
  uint32_t h[8];       /* the chaining state */
  uint64_t n_bytes;    /* bytes hashed so far */
  uint8_t buf[64];     /* a partial block */
  size_t n_buf;        /* its bytes */
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t len);
/* Finishes into out[32]; s must be re-initialised before another use. */
void sha256_final(struct sha256 *s, uint8_t out[32]);
/* The 64 lowercase hex digits of a digest, NUL-terminated, into hex[65]. */
void sha256_hex(const uint8_t digest[32], char hex[65]);
#endif
