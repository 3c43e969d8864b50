/* fuzz/fuzz_safetensors.c — libFuzzer target: safetensors header validation and config.json
 * parsing on arbitrary bytes. Must never crash, leak or run unbounded. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "load/hf_config.h"
#include "load/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct st_set *set = calloc(1, sizeof *set);
  if (!set) return 0;
  struct hearth_err err;
  st_parse(data, size, "fuzz.safetensors", set, 0, &err);
  st_close(set);
  struct hf_config cfg;
  hf_config_parse((const char *)data, size, "config.json", &cfg, &err);
  return 0;
}
