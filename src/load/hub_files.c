/* load/hub_files.c — the inference file set of a Hub repository and the names refused. */
#include "load/hub_files.h"

#include <ctype.h>
#include <string.h>

static const char *const k_top_level[] = {
  "config.json", "generation_config.json", "model.safetensors.index.json", "tokenizer.json",
  "tokenizer_config.json", "chat_template.jinja", "chat_template.json",
  "modules.json", "config_sentence_transformers.json", "sentence_bert_config.json",
};

static int ends_with(const char *s, const char *suf) {
  size_t n = strlen(s), m = strlen(suf);
  return n > m && !strcmp(s + n - m, suf);
}

static int top_level_wanted(const char *base) {
  for (size_t i = 0; i < sizeof k_top_level / sizeof k_top_level[0]; i++)
    if (!strcmp(base, k_top_level[i])) return 1;
  return ends_with(base, ".safetensors");
}

int hub_file_wanted(const char *name) {
  if (!hub_name_safe(name)) return 0;
  if (!strcmp(name, "1_Pooling/config.json")) return 1;
  return !strchr(name, '/') && top_level_wanted(name);
}

int hub_file_looks_wanted(const char *name) {
  const char *base = name;
  for (const char *p = name; *p; p++)
    if (*p == '/' || *p == '\\') base = p + 1;
  return top_level_wanted(base);
}

int hub_name_safe(const char *name) {
  size_t n = strlen(name);
  if (!n || n > 255 || name[0] == '/') return 0;
  const char *c = name;
  for (;;) {
    const char *e = strchr(c, '/');
    size_t len = e ? (size_t)(e - c) : strlen(c);
    if (!len || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.')) return 0;
    for (size_t i = 0; i < len; i++)
      if (c[i] == '\\' || (unsigned char)c[i] < 0x20 || c[i] == 0x7f) return 0;
    if (!e) return 1;
    c = e + 1;
  }
}

static int part_valid(const char *s, size_t n) {
  if (!n || n > 96 || s[0] == '.' || s[0] == '-' || s[n - 1] == '.' || s[n - 1] == '-') return 0;
  for (size_t i = 0; i < n; i++) {
    if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i])) return 0;
    if (i && (s[i] == '-' || s[i] == '.') && s[i - 1] == s[i]) return 0; /* "--" or ".." */
  }
  return 1;
}

int hub_repo_id_valid(const char *s) {
  const char *slash = strchr(s, '/');
  return slash && part_valid(s, (size_t)(slash - s)) && part_valid(slash + 1, strlen(slash + 1));
}

int hub_revision_valid(const char *s) {
  if (!hub_name_safe(s)) return 0;
  for (const char *p = s; *p; p++)
    if (!isalnum((unsigned char)*p) && !strchr("._/-", *p)) return 0;
  return 1;
}
