/* tests/unit/test_load.c — checkpoint validation: every corrupt file is rejected with a clear
 * message naming the file and the field or tensor, never a crash (runs under ASan in CI). */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hearth.h"
#include "load/hf_config.h"
#include "load/safetensors.h"
#include "test.h"

static char g_dir[256];

static void write_file(const char *name, const void *data, size_t len) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", g_dir, name);
  FILE *f = fopen(p, "wb");
  if (!f) { perror(p); abort(); }
  fwrite(data, 1, len, f);
  fclose(f);
}

/* A safetensors file: header JSON (padded) + data bytes. */
static size_t make_st(unsigned char *buf, const char *hdr, size_t data_len, uint64_t claimed_hlen) {
  size_t hl = strlen(hdr);
  uint64_t L = claimed_hlen ? claimed_hlen : hl;
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(L >> (8 * i));
  memcpy(buf + 8, hdr, hl);
  /* bytes <= 0x3F: every f32 / bf16 / f16 value they form is finite (the loader refuses NaN/Inf) */
  for (size_t i = 0; i < data_len; i++) buf[8 + hl + i] = (unsigned char)((i * 7) & 0x3F);
  return 8 + hl + data_len;
}

static void expect_st_error(const char *what, const char *hdr, size_t data_len, uint64_t claimed, size_t truncate_to,
                            const char *needle) {
  static unsigned char buf[1 << 16];
  size_t n = make_st(buf, hdr, data_len, claimed);
  if (truncate_to) n = truncate_to;
  write_file("model.safetensors", buf, n);
  struct st_set *st = NULL;
  struct hearth_err err = {0};
  int rc = st_open_dir(g_dir, &st, &err);
  CHECKF(rc != 0 && st == NULL, "%s: accepted", what);
  CHECKF(strstr(err.msg, "model.safetensors") != NULL, "%s: message does not name the file: %s", what, err.msg);
  CHECKF(strstr(err.msg, needle) != NULL, "%s: message lacks '%s': %s", what, needle, err.msg);
  st_close(st);
}

TEST_GROUP(corrupt_safetensors) {
  const char *good = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
  expect_st_error("short file", good, 0, 0, 5, "too short");
  expect_st_error("header length past EOF", good, 16, 1u << 20, 0, "exceeds the file");
  expect_st_error("huge header length", good, 16, UINT64_MAX - 3, 0, "exceeds the file");
  expect_st_error("bad JSON", "{\"a\":{\"dtype\":\"F32\",", 16, 0, 0, "not valid JSON");
  expect_st_error("not an object", "[1,2,3]", 0, 0, 0, "not a JSON object");
  expect_st_error("truncated data", good, 8, 0, 0, "past the data section");
  expect_st_error("wrong dtype size", "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 16, 0, 0, "'a'");
  expect_st_error("unknown dtype", "{\"a\":{\"dtype\":\"Q9\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0, 0, "unknown dtype");
  expect_st_error("overlap",
                  "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                  16, 0, 0, "overlap");
  expect_st_error("huge dims", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, 0, 0, "overflow");
  expect_st_error("negative dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, 0, 0, "non-negative");
  expect_st_error("offsets reversed", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, 0, 0, "data_offsets");
  expect_st_error("offsets not integers", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[\"0\",8]}}", 8, 0, 0, "data_offsets");
  expect_st_error("missing shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, 0, 0, "shape");
  expect_st_error("duplicate keys", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0, 0, "JSON");
  /* and the good one opens */
  static unsigned char buf[256];
  size_t n = make_st(buf, good, 16, 0);
  write_file("model.safetensors", buf, n);
  struct st_set *st = NULL;
  struct hearth_err err = {0};
  CHECKF(st_open_dir(g_dir, &st, &err) == 0, "good file rejected: %s", err.msg);
  if (st) {
    const struct st_tensor *t = st_find(st, "a");
    CHECK(t && t->n_elems == 4 && t->n_bytes == 16 && t->dtype == ST_F32);
  }
  st_close(st);
}

TEST_GROUP(corrupt_index) {
  static unsigned char buf[256];
  size_t n = make_st(buf, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0);
  write_file("shard1.safetensors", buf, n);
  const char *idx_missing = "{\"weight_map\":{\"a\":\"shard1.safetensors\",\"b\":\"shard1.safetensors\"}}";
  write_file("model.safetensors.index.json", idx_missing, strlen(idx_missing));
  struct st_set *st = NULL;
  struct hearth_err err = {0};
  CHECK(st_open_dir(g_dir, &st, &err) != 0);
  CHECKF(strstr(err.msg, "'b'") && strstr(err.msg, "missing"), "%s", err.msg);
  const char *idx_escape = "{\"weight_map\":{\"a\":\"../etc/passwd\"}}";
  write_file("model.safetensors.index.json", idx_escape, strlen(idx_escape));
  CHECK(st_open_dir(g_dir, &st, &err) != 0);
  CHECKF(strstr(err.msg, "outside"), "%s", err.msg);
  const char *idx_noshard = "{\"weight_map\":{\"a\":\"nope.safetensors\"}}";
  write_file("model.safetensors.index.json", idx_noshard, strlen(idx_noshard));
  CHECK(st_open_dir(g_dir, &st, &err) != 0);
  CHECKF(strstr(err.msg, "nope.safetensors"), "%s", err.msg);
  const char *idx_bad = "{\"weight_map\":[]}";
  write_file("model.safetensors.index.json", idx_bad, strlen(idx_bad));
  CHECK(st_open_dir(g_dir, &st, &err) != 0);
  CHECKF(strstr(err.msg, "weight_map"), "%s", err.msg);
  const char *idx_ok = "{\"weight_map\":{\"a\":\"shard1.safetensors\"}}";
  write_file("model.safetensors.index.json", idx_ok, strlen(idx_ok));
  CHECKF(st_open_dir(g_dir, &st, &err) == 0, "%s", err.msg);
  st_close(st);
  char p[512];
  snprintf(p, sizeof p, "%s/model.safetensors.index.json", g_dir);
  unlink(p);
}

static void expect_cfg_error(const char *json, const char *needle) {
  struct hf_config c;
  struct hearth_err err = {0};
  int rc = hf_config_parse(json, strlen(json), "config.json", &c, &err);
  CHECKF(rc != 0, "accepted: %s", json);
  CHECKF(strstr(err.msg, "config.json") && strstr(err.msg, needle), "message lacks '%s': %s", needle, err.msg);
}

#define BASE "\"hidden_size\":128,\"intermediate_size\":256,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":300"

TEST_GROUP(config_errors) {
  expect_cfg_error("{", "not valid JSON");
  expect_cfg_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE "}", "unsupported model family");
  expect_cfg_error("{" BASE "}", "architectures");
  expect_cfg_error("{\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":128}", "is missing");
  expect_cfg_error("{\"architectures\":[\"Qwen2ForCausalLM\"]," BASE ",\"hidden_size\":\"x\"}", "hidden_size");
  expect_cfg_error("{\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":-5,\"intermediate_size\":256,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":300}", "hidden_size");
  expect_cfg_error("{\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":128,\"intermediate_size\":256,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":3,\"vocab_size\":300}", "num_key_value_heads");
  expect_cfg_error("{\"architectures\":[\"Qwen2ForCausalLM\"]," BASE ",\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4}}", "rope_scaling");
  expect_cfg_error("{\"architectures\":[\"Qwen2ForCausalLM\"]," BASE ",\"num_hidden_layers\":99999999999}", "num_hidden_layers");
  expect_cfg_error("{\"architectures\":[\"Qwen3ForCausalLM\"]," BASE ",\"head_dim\":2048}", "head_dim");
  expect_cfg_error("{\"architectures\":[\"Qwen3ForCausalLM\"]," BASE ",\"head_dim\":63}", "head_dim");
  /* no head_dim and hidden_size < num_attention_heads: the default 128 / 256 = 0 */
  expect_cfg_error("{\"architectures\":[\"Qwen2ForCausalLM\"]," BASE ",\"num_attention_heads\":256,\"num_key_value_heads\":256}", "head_dim");
  struct hf_config c;
  struct hearth_err err = {0};
  const char *ok = "{\"architectures\":[\"Qwen3ForCausalLM\"]," BASE ",\"head_dim\":64,\"eos_token_id\":[5,7],\"rope_theta\":500000}";
  CHECKF(hf_config_parse(ok, strlen(ok), "config.json", &c, &err) == 0, "%s", err.msg);
  CHECK(c.family == HEARTH_FAMILY_QWEN3 && c.head_dim == 64 && c.n_eos == 2 && c.eos_token_ids[1] == 7);
  CHECK(c.rope_theta == 500000.0f && c.num_key_value_heads == 2);
}

/* A whole model directory whose tensors do not match its config: clear errors from the loader. */
TEST_GROUP(model_binding_errors) {
  const char *cfg = "{\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":128,\"intermediate_size\":128,\"num_hidden_layers\":1,"
                    "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"vocab_size\":4,\"tie_word_embeddings\":true}";
  write_file("config.json", cfg, strlen(cfg));
  static unsigned char buf[4096];
  /* embed_tokens present with the wrong shape */
  size_t n = make_st(buf, "{\"model.embed_tokens.weight\":{\"dtype\":\"BF16\",\"shape\":[4,64],\"data_offsets\":[0,512]}}", 512, 0);
  write_file("model.safetensors", buf, n);
  struct hearth_model_params p;
  hearth_model_params_default(&p);
  p.path = g_dir;
  p.n_threads = 1;
  struct hearth_model *m = NULL;
  struct hearth_err err = {0};
  CHECK(hearth_model_load(&p, &m, &err) != 0 && m == NULL);
  CHECKF(strstr(err.msg, "model.embed_tokens.weight") && strstr(err.msg, "[4, 64]") && strstr(err.msg, "[4, 128]"), "%s", err.msg);
  /* right shape, next tensor missing */
  n = make_st(buf, "{\"model.embed_tokens.weight\":{\"dtype\":\"BF16\",\"shape\":[4,128],\"data_offsets\":[0,1024]}}", 1024, 0);
  write_file("model.safetensors", buf, n);
  CHECK(hearth_model_load(&p, &m, &err) != 0 && m == NULL);
  CHECKF(strstr(err.msg, "missing") && strstr(err.msg, "norm.weight"), "%s", err.msg);
  /* unsupported dtype */
  n = make_st(buf, "{\"model.embed_tokens.weight\":{\"dtype\":\"I32\",\"shape\":[4,128],\"data_offsets\":[0,2048]}}", 2048, 0);
  write_file("model.safetensors", buf, n);
  CHECK(hearth_model_load(&p, &m, &err) != 0 && m == NULL);
  CHECKF(strstr(err.msg, "I32"), "%s", err.msg);
  /* no weights at all */
  char path[512];
  snprintf(path, sizeof path, "%s/model.safetensors", g_dir);
  unlink(path);
  CHECK(hearth_model_load(&p, &m, &err) != 0 && m == NULL);
  CHECKF(strstr(err.msg, "model.safetensors"), "%s", err.msg);
  snprintf(path, sizeof path, "%s/config.json", g_dir);
  unlink(path);
  CHECK(hearth_model_load(&p, &m, &err) != 0 && m == NULL);
  CHECKF(strstr(err.msg, "config.json"), "%s", err.msg);
}

TEST_GROUP(hub_cache) {
  char d[512], p[600], out[1024], cmd[1400];
  struct hearth_err err = {0};
  snprintf(d, sizeof d, "%s/hub/models--Org--Tiny/snapshots/abc123", g_dir);

  snprintf(cmd, sizeof cmd, "mkdir -p %s %s/hub/models--Org--Tiny/refs", d, g_dir);
  REQUIRE(system(cmd) == 0);
  snprintf(p, sizeof p, "%s/hub/models--Org--Tiny/refs/main", g_dir);
  FILE *f = fopen(p, "w");
  REQUIRE(f);
  fputs("abc123\n", f);
  fclose(f);
  snprintf(p, sizeof p, "%s/hub", g_dir);
  setenv("HF_HUB_CACHE", p, 1);
  CHECKF(hearth_resolve_model_dir("Org/Tiny", out, sizeof out, &err) == 0, "%s", err.msg);
  CHECKF(!strcmp(out, d), "%s", out);
  CHECK(hearth_resolve_model_dir("Org/Missing", out, sizeof out, &err) == HEARTH_ERR_IO && strstr(err.msg, "Org/Missing"));
  CHECK(hearth_resolve_model_dir(g_dir, out, sizeof out, &err) == 0 && !strcmp(out, g_dir));
  CHECK(hearth_resolve_model_dir("/nonexistent/dir/x", out, sizeof out, &err) == HEARTH_ERR_IO);
  unsetenv("HF_HUB_CACHE");
}

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/hearth_test_load_%d", (int)getpid());
  mkdir(g_dir, 0700);
}

static void all_setup_corrupt_safetensors(void) { setup(); corrupt_safetensors(); }
static void all_setup_corrupt_index(void) { setup(); corrupt_index(); }
static void all_setup_config_errors(void) { setup(); config_errors(); }
static void all_setup_model_binding_errors(void) { setup(); model_binding_errors(); }
static void all_setup_hub_cache(void) { setup(); hub_cache(); }

TEST_MAIN({"corrupt_safetensors", all_setup_corrupt_safetensors}, {"corrupt_index", all_setup_corrupt_index},
          {"config_errors", all_setup_config_errors}, {"model_binding_errors", all_setup_model_binding_errors},
          {"hub_cache", all_setup_hub_cache})
