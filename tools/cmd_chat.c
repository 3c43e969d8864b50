/* tools/cmd_chat.c — `hearth chat MODEL`: an interactive chat in the terminal with the model's own
 * chat template, the answer streamed as it is decoded.
 *
 * Each turn renders the WHOLE conversation with the template (as the server does for a request) and
 * syncs the one session to those tokens: hearth_session_sync keeps the longest common prefix the
 * session already holds, so a turn evaluates only what is new since the last one (the previous
 * answer as re-tokenized, the end-of-turn markup, the new user message). Rendering every turn keeps
 * the template the single source of truth for the prompt (templates rewrite history, e.g. Qwen3
 * drops earlier <think> blocks); the prefix match makes that cheap. --verbose prints the counts.
 *
 * Piped stdin (not a terminal) is the scripted form the tests drive: no prompts, one turn per line
 * or block (chat_input.h), each answer followed by a newline. This file does not own line editing
 * (chat_input.c) nor the template or tokenizer (src/chat, src/tok). */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "base/err.h"
#include "chat/template.h"
#include "chat_input.h"
#include "commands.h"
#include "hearth.h"
#include "tok/tokenizer.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: hearth chat MODEL [--system TEXT] [-n MAX_TOKENS] [--temperature X] [--top-k K]\n"
          "                   [--top-p P] [--min-p P] [--seed S] [--repetition-penalty X]\n"
          "                   [--dtype int4|bf16|f32] [--backend cpu|cuda] [--threads T] [--kv-tokens N]\n"
          "                   [--verbose]\n"
          "\n"
          "MODEL is a model directory or a repo id (ORG/NAME) in the Hugging Face cache.\n"
          "Greedy by default (--temperature 0); -n caps each answer (default 2048 tokens).\n"
          "\n"
          "input:\n"
          "  a line is one message; a line ending in \\ continues on the next line;\n"
          "  a line starting with \"\"\" opens a block that ends at a line ending with \"\"\".\n"
          "  /clear    forget the conversation (the --system message stays)\n"
          "  /exit     leave (so do Ctrl-D and, at the prompt, Ctrl-C)\n"
          "  Ctrl-C while an answer is written stops that answer.\n"
          "When stdin is not a terminal, its lines are the user's turns and only the answers are\n"
          "printed, one per turn, each followed by a newline.\n"
          "--verbose: the load plan, and per turn the prompt tokens, how many were reused from the\n"
          "previous turn's KV cache, how many computed, and the decode speed (on stderr).\n");
}

/* ---- Ctrl-C ------------------------------------------------------------------------- */

static volatile sig_atomic_t g_interrupted;
static void on_sigint(int sig) { (void)sig; g_interrupted = 1; }
static int abort_on_interrupt(void *arg) { (void)arg; return g_interrupted != 0; }

/* ---- one conversation ------------------------------------------------------------- */

struct chat {
  struct hearth_model *m;
  struct hearth_session *s;
  struct tok *tok;
  struct chat_template *tpl;
  struct hearth_sampling sp;
  json_t *messages;      /* the conversation: [{role, content}], the system message first if any */
  long n_max;            /* tokens per answer at most */
  int verbose;
  int n_turn;
  int32_t stop_ids[9];   /* the model's EOS ids and the tokenizer's eos_token (the end-of-turn marker) */
  int n_stop;
};

static int is_stop(const struct chat *c, int32_t id) {
  for (int i = 0; i < c->n_stop; i++) if (c->stop_ids[i] == id) return 1;
  return 0;
}

static int push_message(json_t *messages, const char *role, const char *content, size_t len) {
  json_t *m = json_pack("{s:s, s:s%}", "role", role, "content", content, len);
  return m ? json_array_append_new(messages, m) : -1;
}

/* The answer so far: printed as it grows, kept as the assistant message for the next turn. */
struct answer {
  char *p;
  size_t n, cap;
};

static int answer_add(struct answer *a, const char *text, size_t len, struct hearth_err *err) {
  if (!len) return 0;
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  if (a->n + len + 1 > a->cap) {
    size_t nc = a->cap ? a->cap : 256;
    while (nc < a->n + len + 1) nc *= 2;
    char *g = realloc(a->p, nc);
    if (!g) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
    a->p = g;
    a->cap = nc;
  }
  memcpy(a->p + a->n, text, len);
  a->n += len;
  a->p[a->n] = 0;
  return 0;
}

/* Streams one id's text: the tokenizer's stream holds back a half UTF-8 character until it
 * completes. Ids past the tokenizer's vocabulary (padding rows of the embedding) have no text. */
static int emit(struct chat *c, struct tok_stream *ts, int32_t id, struct answer *a, struct hearth_err *err) {
  const char *p = NULL;
  size_t len = 0;
  if (id < 0 || id >= tok_vocab_size(c->tok)) return 0;
  if (tok_stream_push(ts, id, &p, &len, err)) return err->code;
  return answer_add(a, p, len, err);
}

/* One turn: the user's text → the answer printed and both kept in c->messages. Returns 0 (also when
 * Ctrl-C cut the answer short, or the context is full: the turn ends with a note on stderr) or a
 * negative status for an error that ends the chat. */
static int chat_turn(struct chat *c, const char *user, struct hearth_err *err) {
  if (push_message(c->messages, "user", user, strlen(user))) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  char *prompt = NULL;
  struct answer answer = {0};
  int32_t *ids = NULL, *out = NULL;
  int n_ids = 0, n_out = 0;
  struct hearth_sampler *smp = NULL;
  struct tok_stream *ts = NULL;
  const char *stop = "eos";
  c->n_turn++;
  int rc = chat_template_render(c->tpl, c->messages, NULL, 1, NULL, &prompt, err);
  if (!rc) rc = tok_encode(c->tok, prompt, strlen(prompt), 0, 1, &ids, &n_ids, err);
  if (!rc && n_ids == 0) rc = err_set(err, HEARTH_ERR_ARG, "the template rendered an empty prompt");
  if (!rc) rc = hearth_sampler_new(&c->sp, hearth_model_info(c->m)->n_vocab, &smp, err);
  if (!rc) rc = tok_stream_new(c->tok, 1, &ts, err);
  if (!rc && !(out = malloc(((size_t)c->n_max + 1) * sizeof *out))) rc = err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  if (!rc) hearth_sampler_set_prompt(smp, ids, n_ids);
  g_interrupted = 0;
  struct timespec t0, t1, t2;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (!rc) rc = hearth_session_sync(c->s, ids, n_ids, err);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const int n_reused = rc ? 0 : hearth_session_n_reused(c->s);
  if (rc == HEARTH_ERR_CANCELLED || rc == HEARTH_ERR_CTX_FULL) {
    /* the user's message was not taken: forget it, keep the conversation as it was */
    fprintf(stderr, rc == HEARTH_ERR_CANCELLED ? "\n[interrupted]\n"
                                               : "[the conversation fills the context: /clear to start over]\n");
    json_array_remove(c->messages, json_array_size(c->messages) - 1);
    c->n_turn--;
    rc = 0;
    goto done;
  }
  const int on_device = hearth_sampling_is_plain_greedy(&c->sp);
  int32_t next = -1;
  while (!rc) {
    if (g_interrupted) { stop = "interrupted"; break; }
    if (n_out >= c->n_max) { stop = "max tokens"; break; }
    int32_t t = next >= 0 ? next : hearth_sampler_sample(smp, hearth_session_logits(c->s), out, n_out);
    out[n_out++] = t;
    if (is_stop(c, t)) break;
    rc = emit(c, ts, t, &answer, err);
    if (rc) break;
    if (n_out >= c->n_max) continue; /* no forward pass for a token that is not continued */
    if (on_device) {
      const int32_t *tp = &t;
      const int one = 1;
      rc = hearth_sessions_step_greedy(&c->s, 1, &tp, &one, &next, NULL, err);
    } else {
      rc = hearth_session_append(c->s, &t, 1, err);
    }
    if (rc == HEARTH_ERR_CTX_FULL) { stop = "context full"; rc = 0; break; }
    if (rc == HEARTH_ERR_CANCELLED) { stop = "interrupted"; rc = 0; break; } /* Ctrl-C inside the step */
  }
  if (!rc) {
    const char *p = NULL;
    size_t len = 0;
    rc = tok_stream_flush(ts, &p, &len, err);
    if (!rc) rc = answer_add(&answer, p, len, err);
  }
  if (!rc) {
    fputc('\n', stdout);
    fflush(stdout);
    if (strcmp(stop, "eos") && strcmp(stop, "max tokens")) fprintf(stderr, "[%s]\n", stop);
    /* the answer as printed is the assistant message: what the next render re-tokenizes */
    if (push_message(c->messages, "assistant", answer.p ? answer.p : "", answer.n))
      rc = err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  }
  clock_gettime(CLOCK_MONOTONIC, &t2);
  if (!rc && c->verbose) {
    double pf = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    double dc = (double)(t2.tv_sec - t1.tv_sec) + 1e-9 * (double)(t2.tv_nsec - t1.tv_nsec);
    fprintf(stderr, "chat: turn %d: %d prompt tokens, %d reused, %d computed in %.3f s; %d generated (stop: %s), %.1f tok/s\n",
            c->n_turn, n_ids, n_reused, n_ids - n_reused, pf, n_out, stop, dc > 0 ? n_out / dc : 0.0);
  }
done:
  g_interrupted = 0; /* that Ctrl-C was the answer's; the prompt waits for its own */
  tok_stream_free(ts);
  hearth_sampler_free(smp);
  free(out);
  free(ids);
  free(prompt);
  free(answer.p);
  return rc;
}

/* /clear: back to the system message alone. The session keeps its tokens: the next turn's sync
 * reuses whatever prefix still matches (the system prompt), which is correct KV, not memory. */
static void chat_clear(struct chat *c, const char *system) {
  json_array_clear(c->messages);
  if (system) push_message(c->messages, "system", system, strlen(system));
}

/* ---- the command ------------------------------------------------------------------- */

static int parse_options(int argc, char **argv, struct hearth_model_params *mp, struct chat *c,
                         const char **system) {
  for (int i = 1; i < argc; i++) {
    int r = arg_model_option(argc, argv, &i, mp);
    if (r < 0) return 2;
    if (r) continue;
    const char *a = argv[i], *v;
    long x;
    double f;
    if (!strcmp(a, "--system")) { if (!(*system = arg_value(argc, argv, &i))) return 2; }
    else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) { if (!(v = arg_value(argc, argv, &i)) || arg_int(a, v, 1, 1 << 24, &c->n_max)) return 2; }
    else if (!strcmp(a, "--temperature")) { if (!(v = arg_value(argc, argv, &i)) || arg_float(a, v, &f)) return 2; c->sp.temperature = (float)f; }
    else if (!strcmp(a, "--top-p")) { if (!(v = arg_value(argc, argv, &i)) || arg_float(a, v, &f)) return 2; c->sp.top_p = (float)f; }
    else if (!strcmp(a, "--min-p")) { if (!(v = arg_value(argc, argv, &i)) || arg_float(a, v, &f)) return 2; c->sp.min_p = (float)f; }
    else if (!strcmp(a, "--repetition-penalty")) { if (!(v = arg_value(argc, argv, &i)) || arg_float(a, v, &f)) return 2; c->sp.repetition_penalty = (float)f; }
    else if (!strcmp(a, "--top-k")) { if (!(v = arg_value(argc, argv, &i)) || arg_int(a, v, 0, 1 << 30, &x)) return 2; c->sp.top_k = (int)x; }
    else if (!strcmp(a, "--seed")) { if (!(v = arg_value(argc, argv, &i)) || arg_int(a, v, 0, 0x7fffffffffffffffL, &x)) return 2; c->sp.seed = (uint64_t)x; }
    else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 1; }
    else if (a[0] != '-' && !mp->path) mp->path = a; /* the positional MODEL */
    else { fprintf(stderr, "hearth chat: unknown option '%s'\n", a); usage(stderr); return 2; }
  }
  if (!mp->path) { usage(stderr); return 2; }
  return 0;
}

/* Loads the model, its tokenizer and its template from dir. */
static int chat_open(struct chat *c, struct hearth_model_params *mp, struct hearth_err *err) {
  int rc = hearth_model_load(mp, &c->m, err);
  if (!rc && hearth_model_info(c->m)->is_embedding)
    rc = err_set(err, HEARTH_ERR_ARG, "%s is an embedding model: it cannot chat", mp->path);
  if (!rc) rc = tok_load_dir(mp->path, &c->tok, err);
  if (!rc) rc = tok_check_model_vocab(c->tok, hearth_model_info(c->m)->n_vocab, err);
  if (!rc && !chat_template_dir_has(mp->path))
    rc = err_set(err, HEARTH_ERR_UNSUPPORTED, "%s has no chat template (use hearth run)", mp->path);
  if (!rc) rc = chat_template_load_dir(mp->path, NULL, &c->tpl, err);
  if (!rc) {
    struct hearth_session_params spp = {0};
    rc = hearth_session_new(c->m, &spp, &c->s, err);
  }
  if (rc) return rc;
  hearth_session_set_abort(c->s, abort_on_interrupt, NULL);
  const struct hearth_model_info *mi = hearth_model_info(c->m);
  for (int i = 0; i < mi->n_eos && c->n_stop < 8; i++) c->stop_ids[c->n_stop++] = mi->eos_ids[i];
  if (tok_eos_id(c->tok) >= 0) c->stop_ids[c->n_stop++] = tok_eos_id(c->tok);
  return 0;
}

int cmd_chat(int argc, char **argv) {
  struct hearth_model_params mp;
  hearth_model_params_default(&mp);
  mp.kv_seqs = 1; /* one session: Gemma 4's sliding layers need one window of KV */
  struct chat c = {0};
  hearth_sampling_default(&c.sp);
  c.sp.temperature = 0.0f;
  c.n_max = 2048;
  const char *system = NULL;
  int r = parse_options(argc, argv, &mp, &c, &system);
  if (r) return r == 1 ? 0 : r;
  c.verbose = mp.verbose;
  struct hearth_err err = {0};
  char dir[4096];
  if (hearth_resolve_model_dir(mp.path, dir, sizeof dir, &err)) {
    fprintf(stderr, "hearth chat: %s\n", err.msg);
    return 1;
  }
  mp.path = dir;
  /* no SA_RESTART: Ctrl-C at the prompt must interrupt the blocking read */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);

  int rc = chat_open(&c, &mp, &err);
  if (!rc && !(c.messages = json_array())) rc = err_set(&err, HEARTH_ERR_NOMEM, "out of memory");
  if (!rc) chat_clear(&c, system);
  const int tty = isatty(STDIN_FILENO);
  int status = 0;
  while (!rc) {
    char *text = NULL;
    /* Ctrl-C while loading, or between the read and here, counts as Ctrl-C at the prompt */
    int in = g_interrupted ? CHAT_INPUT_INTERRUPTED : chat_input_read(stdin, tty ? stdout : NULL, &text);
    if (in == CHAT_INPUT_EOF || in == CHAT_INPUT_INTERRUPTED) {
      if (tty) fputc('\n', stdout);
      if (in == CHAT_INPUT_INTERRUPTED) status = 130; /* the shell's code for "ended by SIGINT" */
      break;
    }
    if (in < 0) { rc = err_set(&err, HEARTH_ERR_NOMEM, "out of memory"); break; }
    if (!strcmp(text, "/exit") || !strcmp(text, "/bye")) { free(text); break; }
    if (!strcmp(text, "/clear")) {
      chat_clear(&c, system);
      if (c.verbose || tty) fprintf(stderr, "[conversation cleared]\n");
    } else if (text[0] == '/' && !strchr(text, ' ') && !strchr(text, '\n')) {
      fprintf(stderr, "unknown command %s (/clear, /exit; a message starting with / needs a space)\n", text);
    } else {
      rc = chat_turn(&c, text, &err);
    }
    free(text);
  }
  if (rc) fprintf(stderr, "hearth chat: %s\n", err.msg);
  json_decref(c.messages);
  chat_template_free(c.tpl);
  tok_free(c.tok);
  hearth_session_free(c.s);
  hearth_model_free(c.m);
  return rc ? 1 : status;
}
