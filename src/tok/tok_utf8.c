/* tok/tok_utf8.c — UTF-8 validation by the Unicode "maximal subpart" rule (what Python's
 * decode("utf-8", "replace") and Rust's from_utf8_lossy use), and the GPT-2 byte alphabet. */
#include "tok/tok_internal.h"

/* Allowed range of the second byte for a lead byte; 0 length = not a lead. */
static int lead_info(unsigned char c, unsigned char *lo, unsigned char *hi) {
  *lo = 0x80, *hi = 0xBF;
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;
  if (c < 0xE0) return 2;
  if (c == 0xE0) { *lo = 0xA0; return 3; }
  if (c == 0xED) { *hi = 0x9F; return 3; }
  if (c < 0xF0) return 3;
  if (c == 0xF0) { *lo = 0x90; return 4; }
  if (c < 0xF4) return 4;
  if (c == 0xF4) { *hi = 0x8F; return 4; }
  return 0;
}

/* Number of bytes of s[0..n) that form a prefix of a valid sequence (<= full length). */
static int valid_prefix(const unsigned char *s, size_t n, int *full) {
  unsigned char lo, hi;
  int len = lead_info(s[0], &lo, &hi);
  *full = len;
  if (len == 0) return 0;
  int k = 1;
  while (k < len && (size_t)k < n) {
    unsigned char c = s[k];
    if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) break;
    k++;
  }
  return k;
}

int tok_utf8_valid_len(const unsigned char *s, size_t n) {
  if (n == 0) return 0;
  if (s[0] < 0x80) return 1;
  int full, k = valid_prefix(s, n, &full);
  return full && k == full ? full : 0;
}

int tok_utf8_invalid_len(const unsigned char *s, size_t n) {
  int full, k = valid_prefix(s, n, &full);
  return k ? k : 1;
}

int tok_utf8_incomplete(const unsigned char *s, size_t n) {
  if (n == 0) return 0;
  int full, k = valid_prefix(s, n, &full);
  return full > 1 && (size_t)k == n && k < full;
}

int tok_utf8_put(char *o, uint32_t cp) {
  if (cp < 0x80) { o[0] = (char)cp; return 1; }
  if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

int tok_utf8_get(const unsigned char *s, uint32_t *cp) {
  if (s[0] < 0x80) { *cp = s[0]; return 1; }
  if (s[0] < 0xE0) { *cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F); return 2; }
  if (s[0] < 0xF0) { *cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F); return 3; }
  *cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
  return 4;
}

/* GPT-2: printable bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF stand for themselves; the other 68
 * bytes map, in order, to U+0100, U+0101, ... */
uint32_t tok_byte_to_cp(uint8_t b) {
  if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
  /* unprintable bytes in order: 0x00-0x20 (33), 0x7F-0xA0 (34), 0xAD (1) */
  if (b <= 0x20) return 0x100 + b;
  if (b <= 0xA0) return 0x100 + 33 + (b - 0x7F);
  return 0x100 + 67; /* 0xAD */
}
