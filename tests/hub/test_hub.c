/* tests/hub/test_hub.c — SHA-256 against the FIPS 180-2 / NIST test vectors (and split updates
 * against one-shot digests), and the names hub_pull accepts or refuses. */
#include <stdlib.h>
#include <string.h>

#include "base/sha256.h"
#include "load/hub_files.h"
#include "test.h"

static void digest(const void *p, size_t n, char hex[65]) {
  struct sha256 s;
  uint8_t d[32];
  sha256_init(&s);
  sha256_update(&s, p, n);
  sha256_final(&s, d);
  sha256_hex(d, hex);
}

TEST_GROUP(sha256) {
  char hex[65];
  digest("", 0, hex);
  CHECK(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
  digest("abc", 3, hex);
  CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 56 bytes: padding spills a block */
  digest(m448, strlen(m448), hex);
  CHECK(!strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
  const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
  digest(m896, strlen(m896), hex);
  CHECK(!strcmp(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"));
  char *million = malloc(1000000);
  REQUIRE(million);
  memset(million, 'a', 1000000);
  digest(million, 1000000, hex);
  CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
  /* the same bytes fed in uneven pieces (a download's chunks) give the one-shot digest */
  for (size_t step = 1; step < 200; step += 37) {
    struct sha256 s;
    uint8_t d[32];
    char h2[65];
    sha256_init(&s);
    for (size_t off = 0; off < 1000000; off += step) sha256_update(&s, million + off, off + step > 1000000 ? 1000000 - off : step);
    sha256_final(&s, d);
    sha256_hex(d, h2);
    CHECKF(!strcmp(h2, hex), "step %zu", step);
  }
  free(million);
}

TEST_GROUP(names) {
  CHECK(hub_name_safe("config.json") && hub_name_safe("1_Pooling/config.json") && hub_name_safe("a.b/c..d"));
  const char *bad[] = {"", "/etc/passwd", "../x", "a/../b", "a/..", "./a", "a//b", "a/", "a\\b", "..", ".", "a\nb"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECKF(!hub_name_safe(bad[i]), "'%s' accepted", bad[i]);
  CHECK(hub_file_wanted("config.json") && hub_file_wanted("model-00001-of-00002.safetensors") &&
        hub_file_wanted("model.safetensors.index.json") && hub_file_wanted("tokenizer.json") &&
        hub_file_wanted("chat_template.jinja") && hub_file_wanted("1_Pooling/config.json") && hub_file_wanted("modules.json"));
  CHECK(!hub_file_wanted("README.md") && !hub_file_wanted("onnx/model.safetensors") && !hub_file_wanted("pytorch_model.bin") &&
        !hub_file_wanted("2_Dense/config.json") && !hub_file_wanted("../config.json") && !hub_file_wanted(".safetensors"));
  CHECK(hub_file_looks_wanted("../../evil.safetensors") && hub_file_looks_wanted("a\\config.json") && !hub_file_looks_wanted("../README.md"));
  CHECK(hub_repo_id_valid("Qwen/Qwen2.5-3B-Instruct") && hub_repo_id_valid("google/gemma-4-E2B-it") && hub_repo_id_valid("a/b"));
  const char *bad_ids[] = {"Qwen", "/x", "x/", "a/b/c", "../x", "a/..", "a/-b", "a/b.", "a--b/c", "a/b..c", ".a/b", "a/b c", "a\\b/c"};
  for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) CHECKF(!hub_repo_id_valid(bad_ids[i]), "'%s' accepted", bad_ids[i]);
  CHECK(hub_revision_valid("main") && hub_revision_valid("refs/pr/1") && hub_revision_valid("v1.0"));
  CHECK(!hub_revision_valid("../main") && !hub_revision_valid("a b") && !hub_revision_valid("/x") && !hub_revision_valid(""));
}

TEST_MAIN(T(sha256), T(names))
