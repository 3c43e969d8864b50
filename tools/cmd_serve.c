/* tools/cmd_serve.c — `hearth serve`: the OpenAI-compatible HTTP server on loopback.
 * Parses the command line into struct server_options and calls server_run (src/server/). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"

#ifdef HEARTH_HAVE_SERVER
#include "server/server.h"

static volatile sig_atomic_t g_stop;
static char *g_key_file; /* --api-key-file's key; file scope so early returns do not leak it */
static void on_signal(int sig) { (void)sig; g_stop = 1; }

static void usage(FILE *f) {
  fprintf(f,
          "usage: hearth serve [--model [ID=]DIR|ORG/NAME ...] [options]\n"
          "  without --model: serves " SERVER_DEFAULT_MODEL " and " SERVER_DEFAULT_EMBEDDING_MODEL "\n"
          "  from the Hugging Face cache, pulling whichever is missing (unless --offline)\n"
          "  --model [ID=]DIR   serve this Hugging Face model directory or cached repo id (repeatable);\n"
          "                     clients name it by ID, default the repo id or the directory's base name.\n"
          "                     Any other model of the Hugging Face cache is loaded when a request names it\n"
          "  --max-loaded N     generative models kept loaded; the least recently used one is unloaded\n"
          "                     once its requests finish [1, or the number of --model]\n"
          "  --max-loaded-embedding N   the same for embedding models [1, or the number of --model]\n"
          "  --offline          never download: a missing default model is an error\n"
          "  --allow-model-admin  allow POST /v1/models/pull and DELETE /v1/models/ORG/NAME without\n"
          "                     --api-key (refused otherwise: a web page could trigger them)\n"
          "  --host ADDR        loopback address to bind (127.0.0.1, ::1, localhost) [127.0.0.1]\n"
          "  --port N           TCP port, 0 = any free port [8080]\n"
          "  --port-file PATH   write the bound port here once listening\n"
          "  --embedding-model [ID=]DIR   serve this directory as an embedding model (/v1/embeddings)\n"
          "                     even when its config.json names a causal LM (fine-tuned Qwen3 embedders);\n"
          "                     pooling from sentence-transformers' 1_Pooling/config.json, else last token\n"
          "  --api-key-file F   require 'Authorization: Bearer <first line of F>' (1 to 4096 characters)\n"
          "  --api-key KEY      the same with the key inline (also $HEARTH_API_KEY; empty is refused)\n"
          "  --parallel N       sequences decoded together per model [4]\n"
          "  --ctx N            context tokens per sequence [4096]\n"
          "  --kv-tokens N      KV pool per model [parallel * ctx]\n"
          "  --queue N          requests waiting for a slot before 503 [1024]\n"
          "  --max-body BYTES   request body limit, 413 above [8388608]\n"
          "  --max-depth N      JSON nesting limit, 400 above [64]\n"
          "  --keepalive-ms N   SSE ': keep-alive' comment after N ms without data [3000]\n"
          "  --prefill-chunk N  prompt tokens per engine step, all sequences [512 CPU, 4096 CUDA]\n"
          "  --speculate K      greedy requests draft up to K (1..8) tokens by prompt lookup in steps of one sequence, same output [8; on CUDA Qwen only]\n"
          "  --no-speculate     plain decoding only\n"
          "  --max-conns N      concurrent connections [128]\n"
          "  --timeout S        idle connection timeout in seconds [15]\n"
          "  --header-timeout S a request head must arrive within S seconds, a body keep up\n"
          "                     16 KiB/s after S seconds; slower clients are disconnected [10]\n"
          "  --shutdown-grace-ms N   on SIGTERM/SIGINT, requests in flight may finish for N ms\n"
          "                     before they are cancelled; new requests get 503 [5000]\n"
          "  --dtype int4|bf16|f32   weight format [int4]\n"
          "  --backend cpu|cuda      [cpu]\n"
          "  --kv-cache-dir DIR keep shared KV prefixes on disk, reused after a restart\n"
          "  --threads N        CPU threads, 0 = all cores [0]\n"
          "  -v, --verbose      log every request\n");
}

/* The longest API key accepted: far above any real token, and it must fit in one request head
 * (http.c caps a connection's header memory at 64 KiB). */
#define SERVE_MAX_KEY 4096

/* Reads the first line of path (trailing whitespace stripped) into *out (malloc'd); 0 on success,
 * or -1 with why filled: a key is never cut short, a longer one is refused. */
static int read_key_file(const char *path, char **out, const char **why) {
  *why = "cannot read it";
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char *line = NULL;
  size_t cap = 0;
  ssize_t got = getline(&line, &cap, f);
  fclose(f);
  if (got < 0) { free(line); return -1; }
  size_t n = (size_t)got;
  while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t')) line[--n] = 0;
  if (!n || n > SERVE_MAX_KEY) {
    *why = n ? "its first line is longer than 4096 characters" : "its first line is empty";
    free(line);
    return -1;
  }
  *out = line;
  return 0;
}

static int num(const char *flag, const char *v, long lo, long hi, long *out) {
  char *end;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || *end || x < lo || x > hi) {
    fprintf(stderr, "hearth serve: %s needs a number in [%ld, %ld]\n", flag, lo, hi);
    return -1;
  }
  *out = x;
  return 0;
}

int cmd_serve(int argc, char **argv) {
  struct server_options o;
  server_options_default(&o);
  o.api_key = getenv("HEARTH_API_KEY");
  if (o.api_key && !*o.api_key) o.api_key = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    long x = 0;
    int takes = 1;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
    else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) { o.verbose = 1; takes = 0; }
    else if (!strcmp(a, "--offline")) { o.offline = 1; takes = 0; }
    else if (!strcmp(a, "--allow-model-admin")) { o.allow_model_admin = 1; takes = 0; }
    else if (!strcmp(a, "--no-speculate")) { o.speculate = 0; takes = 0; }
    else if (!v) { fprintf(stderr, "hearth serve: %s needs a value (or is unknown)\n", a); usage(stderr); return 2; }
    else if (!strcmp(a, "--model") || !strcmp(a, "--embedding-model")) {
      if (o.n_models == SERVER_MAX_MODELS) { fprintf(stderr, "hearth serve: at most %d models\n", SERVER_MAX_MODELS); return 2; }
      char *eq = strchr(v, '=');
      struct server_model_opt *m = &o.models[o.n_models++];
      if (eq) { *eq = 0; m->id = v; m->path = eq + 1; } else { m->path = v; }
      m->embedding = !strcmp(a, "--embedding-model");
    }
    else if (!strcmp(a, "--host")) o.host = v;
    else if (!strcmp(a, "--max-loaded")) { if (num(a, v, 1, 16, &x)) return 2; o.max_loaded = (int)x; }
    else if (!strcmp(a, "--max-loaded-embedding")) { if (num(a, v, 1, 16, &x)) return 2; o.max_loaded_embedding = (int)x; }
    else if (!strcmp(a, "--port")) { if (num(a, v, 0, 65535, &x)) return 2; o.port = (int)x; }
    else if (!strcmp(a, "--port-file")) o.port_file = v;
    else if (!strcmp(a, "--api-key")) {
      if (!*v || strlen(v) > SERVE_MAX_KEY) {
        fprintf(stderr, "hearth serve: --api-key must be 1 to %d characters\n", SERVE_MAX_KEY);
        return 2;
      }
      o.api_key = v;
    }
    else if (!strcmp(a, "--api-key-file")) {
      const char *why;
      free(g_key_file);
      g_key_file = NULL;
      if (read_key_file(v, &g_key_file, &why)) { fprintf(stderr, "hearth serve: --api-key-file %s: %s\n", v, why); return 2; }
      o.api_key = g_key_file;
    }
    else if (!strcmp(a, "--parallel")) { if (num(a, v, 1, 256, &x)) return 2; o.n_slots = (int)x; }
    else if (!strcmp(a, "--ctx")) { if (num(a, v, 16, 1 << 20, &x)) return 2; o.n_ctx = (int)x; }
    else if (!strcmp(a, "--kv-tokens")) { if (num(a, v, 16, 1 << 26, &x)) return 2; o.model.kv_tokens = (int)x; }
    else if (!strcmp(a, "--queue")) { if (num(a, v, 1, 1 << 16, &x)) return 2; o.max_queue = (int)x; }
    else if (!strcmp(a, "--max-body")) { if (num(a, v, 1024, 1L << 30, &x)) return 2; o.max_body = (size_t)x; }
    else if (!strcmp(a, "--max-depth")) { if (num(a, v, 1, 10000, &x)) return 2; o.max_depth = (int)x; }
    else if (!strcmp(a, "--keepalive-ms")) { if (num(a, v, 50, 600000, &x)) return 2; o.keepalive_ms = (int)x; }
    else if (!strcmp(a, "--prefill-chunk")) { if (num(a, v, 1, 1 << 20, &x)) return 2; o.prefill_chunk = (int)x; }
    else if (!strcmp(a, "--speculate")) { if (num(a, v, 0, HEARTH_SPEC_MAX, &x)) return 2; o.speculate = (int)x; }
    else if (!strcmp(a, "--max-conns")) { if (num(a, v, 1, 65536, &x)) return 2; o.max_conns = (int)x; }
    else if (!strcmp(a, "--shutdown-grace-ms")) { if (num(a, v, 0, 3600000, &x)) return 2; o.shutdown_grace_ms = (int)x; }
    else if (!strcmp(a, "--timeout")) { if (num(a, v, 1, 3600, &x)) return 2; o.timeout_s = (int)x; }
    else if (!strcmp(a, "--header-timeout")) { if (num(a, v, 1, 3600, &x)) return 2; o.head_timeout_s = (int)x; }
    else if (!strcmp(a, "--kv-cache-dir")) o.model.kv_cache_dir = v;
    else if (!strcmp(a, "--threads")) { if (num(a, v, 0, 4096, &x)) return 2; o.model.n_threads = (int)x; }
    else if (!strcmp(a, "--dtype")) {
      if (!strcmp(v, "int4")) o.model.dtype = HEARTH_DTYPE_INT4;
      else if (!strcmp(v, "bf16")) o.model.dtype = HEARTH_DTYPE_BF16;
      else if (!strcmp(v, "f32")) o.model.dtype = HEARTH_DTYPE_F32;
      else { fprintf(stderr, "hearth serve: --dtype int4|bf16|f32\n"); return 2; }
    }
    else if (!strcmp(a, "--backend")) {
      if (!strcmp(v, "cpu")) o.model.backend = HEARTH_BACKEND_CPU;
      else if (!strcmp(v, "cuda")) o.model.backend = HEARTH_BACKEND_CUDA;
      else { fprintf(stderr, "hearth serve: --backend cpu|cuda\n"); return 2; }
    }
    else { fprintf(stderr, "hearth serve: unknown option %s\n", a); usage(stderr); return 2; }
    i += takes;
  }
  if (o.api_key && strlen(o.api_key) > SERVE_MAX_KEY) {
    fprintf(stderr, "hearth serve: the API key is longer than %d characters\n", SERVE_MAX_KEY);
    return 2;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  struct hearth_err err = {0};
  int rc = server_run(&o, &g_stop, &err);
  free(g_key_file);
  g_key_file = NULL;
  if (rc) {
    fprintf(stderr, "hearth serve: %s\n", err.msg);
    return 1;
  }
  return 0;
}

#else
int cmd_serve(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "hearth serve: this build has no server (libmicrohttpd was not found)\n");
  return 2;
}
#endif
