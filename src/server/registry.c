/* server/registry.c — loading models on request, LRU unloading, references (see registry.h). */
#include "server/registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/err.h"
#include "load/hf_config.h"
#include "load/hub.h"
#include "load/hub_cache.h"
#include "load/safetensors.h"
#include "load/sentence_transformers.h"
#include "server/embed_queue.h"
#include "server/engine.h"
#include "server/json_mask.h"
#include "server/textio.h"
#include "tok/tokenizer.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int is_dir(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int srv_valid_repo_id(const char *name) {
  const char *slash = strchr(name, '/');
  if (!slash || strchr(slash + 1, '/') || strstr(name, "..")) return 0;
  const char *part[2] = {name, slash + 1};
  size_t len[2] = {(size_t)(slash - name), strlen(slash + 1)};
  for (int k = 0; k < 2; k++) {
    if (!len[k] || len[k] > 96 || part[k][0] == '.' || part[k][0] == '-') return 0;
    for (size_t i = 0; i < len[k]; i++) {
      char c = part[k][i];
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '.' || c == '_' || c == '-'))
        return 0;
    }
  }
  return 1;
}

/* ---- opening and closing one model ------------------------------------------------------ */

/* Frees the model's resources; the registry fields stay (the slot's state is the registry's). */
static void model_close(struct srv_model *m) {
  engine_free(m->engine);
  jvocab_free(m->jv);
  embq_free(m->embq);
  textio_free(m->tio);
  hearth_model_free(m->model);
  m->engine = NULL;
  m->jv = NULL;
  m->embq = NULL;
  m->tio = NULL;
  m->model = NULL;
  m->info = NULL;
  atomic_store(&m->embed_busy, 0);
  atomic_store(&m->embed_cancelled, 0);
}

/* Loads m->path (set by the caller) into m. Runs without the registry lock: only the loader
 * touches a LOADING slot's model fields. */
static int model_open(const struct server_options *o, struct srv_model *m, int embedding,
                      struct hearth_err *err) {
  m->created = time(NULL);
  struct hearth_model_params mp = o->model;
  mp.path = m->path;
  mp.embedding = embedding;
  if (!mp.kv_tokens) mp.kv_tokens = o->n_slots * o->n_ctx;
  if (!mp.kv_seqs) mp.kv_seqs = o->n_slots; /* the sessions that hold KV: one per slot */
  int rc = hearth_model_load(&mp, &m->model, err);
  if (!rc) {
    m->info = hearth_model_info(m->model);
    m->n_ctx = o->n_ctx;
    if (m->info->n_ctx_train > 0 && m->n_ctx > m->info->n_ctx_train) m->n_ctx = m->info->n_ctx_train;
    rc = textio_load(m->path, &m->tio, err);
    /* a tokenizer from another model: refuse at load, not at the first request it breaks */
    if (!rc) rc = tok_check_model_vocab(textio_tok(m->tio), m->info->n_vocab, err);
    /* the first request must not pay for the GPU's lazy first launches (runtime/warm_up.c) */
    if (!rc) rc = hearth_model_warm_up(m->model, err);
  }
  if (!rc && m->info->is_embedding) {
    rc = embq_new(m->model, &m->embq, err);
  } else if (!rc) {
    struct engine_params ep = {.n_slots = o->n_slots, .n_ctx = m->n_ctx, .max_queue = o->max_queue,
                               .prefill_chunk = o->prefill_chunk, .speculate = o->speculate};
    rc = jvocab_new(textio_tok(m->tio), &m->jv, err);
    if (!rc) rc = engine_new(m->model, &ep, &m->engine, err);
  }
  if (rc) {
    err_prefix(err, "model %s", m->id);
    model_close(m);
  }
  return rc;
}

/* ---- the registry ----------------------------------------------------------------------- */

int registry_init(struct srv *s, struct hearth_err *err) {
  const struct server_options *o = s->opt;
  pthread_mutex_init(&s->reg_mu, NULL);
  pthread_cond_init(&s->reg_cv, NULL);
  /* the command line's models are all resident at start unless a smaller limit is asked for; a
   * --model may turn out to be an embedding model (its files say so), so all count for that kind */
  int n_gen = 0;
  for (int i = 0; i < o->n_models; i++) n_gen += !o->models[i].embedding;
  s->max_loaded[0] = o->max_loaded > 0 ? o->max_loaded : n_gen > 1 ? n_gen : 1;
  s->max_loaded[1] = o->max_loaded_embedding > 0 ? o->max_loaded_embedding
                                                 : o->n_models > 1 ? o->n_models : 1;
  for (int i = 0; i < o->n_models && i < SERVER_MAX_MODELS; i++) {
    const struct server_model_opt *mo = &o->models[i];
    struct srv_entry *e = &s->entries[s->n_entries++];
    const char *base = strrchr(mo->path, '/');
    base = base && base[1] ? base + 1 : mo->path;
    /* a repo id from the cache keeps its full name, as /v1/models lists it */
    const char *id = mo->id ? mo->id : (!is_dir(mo->path) && srv_valid_repo_id(mo->path) ? mo->path : base);
    snprintf(e->id, sizeof e->id, "%s", id);
    e->src = mo->path;
    e->embedding = mo->embedding;
    for (int j = 0; j < s->n_entries - 1; j++)
      if (!strcmp(s->entries[j].id, e->id))
        return err_set(err, HEARTH_ERR_ARG, "two models named '%s' (use --model ID=DIR)", e->id);
  }
  return 0;
}

void registry_free(struct srv *s) {
  for (int i = 0; i < s->n_models; i++)
    if (s->models[i].state != SLOT_EMPTY) model_close(&s->models[i]);
  pthread_cond_destroy(&s->reg_cv);
  pthread_mutex_destroy(&s->reg_mu);
}

void registry_shutdown_engines(struct srv *s) {
  pthread_mutex_lock(&s->reg_mu);
  for (int i = 0; i < s->n_models; i++) {
    struct srv_model *m = &s->models[i];
    if ((m->state == SLOT_READY || m->state == SLOT_UNLOADING) && m->engine) engine_shutdown(m->engine);
  }
  pthread_mutex_unlock(&s->reg_mu);
}

/* The slot of id in one of the live states, or NULL. Lock held. */
static struct srv_model *find_live(struct srv *s, const char *id) {
  for (int i = 0; i < s->n_models; i++) {
    struct srv_model *m = &s->models[i];
    if ((m->state == SLOT_LOADING || m->state == SLOT_READY || m->state == SLOT_UNLOADING ||
         m->state == SLOT_CLOSING) && !strcmp(m->id, id))
      return m;
  }
  return NULL;
}

/* "ROOT/models--ORG--NAME/" for repo, or "" when no cache root can be named. */
static void repo_folder(const char *repo, char *out, size_t cap) {
  char root[1024];
  const char *slash = strchr(repo, '/');
  out[0] = 0;
  if (!slash || hub_cache_root(root, sizeof root)) return;
  snprintf(out, cap, "%s/models--%.*s--%s/", root, (int)(slash - repo), repo, slash + 1);
}

/* Lock held. */
static int in_use_locked(struct srv *s, const char *repo) {
  char folder[1400];
  repo_folder(repo, folder, sizeof folder);
  size_t n = strlen(folder);
  for (int i = 0; i < s->n_models; i++) {
    struct srv_model *m = &s->models[i];
    if (m->state == SLOT_EMPTY || m->state == SLOT_FAILED) continue;
    if (!strcmp(m->id, repo) || (n && !strncmp(m->path, folder, n))) return 1;
  }
  return 0;
}

int registry_in_use(struct srv *s, const char *repo) {
  pthread_mutex_lock(&s->reg_mu);
  int used = in_use_locked(s, repo);
  pthread_mutex_unlock(&s->reg_mu);
  return used;
}

int registry_remove(struct srv *s, const char *repo, int *http_status, struct hearth_err *err) {
  pthread_mutex_lock(&s->reg_mu);
  int rc = 0;
  if (in_use_locked(s, repo)) {
    *http_status = 409;
    rc = err_set(err, HEARTH_ERR_ARG, "%s is loaded; it can be deleted once another model has "
                 "replaced it (or after a restart without it)", repo);
  } else {
    rc = hub_cache_rm(repo, err);
    *http_status = rc == HEARTH_ERR_IO ? 404 : rc == HEARTH_ERR_UNSUPPORTED ? 501 : rc ? 500 : 200;
  }
  pthread_mutex_unlock(&s->reg_mu);
  return rc;
}

/* Whether dir holds an embedding model, before loading it (to count it against the right limit),
 * by the rules the loader applies: a sentence-transformers Pooling module, or no LM head where the
 * config does not tie one, or Qwen3Model names (no "model." prefix). Reads only headers. */
static int guess_embedding(const char *dir) {
  struct sentence_tf stf;
  struct hearth_err e = {0};
  if (!sentence_tf_load(dir, &stf, &e) && stf.present) return 1;
  struct hf_config *c = calloc(1, sizeof *c);
  struct st_set *set = NULL;
  int emb = 0;
  if (c && !hf_config_load(dir, c, &e) && !st_open_dir(dir, &set, &e)) {
    int head = st_find(set, "lm_head.weight") != NULL;
    emb = !head && (!c->tie_word_embeddings || (!st_find(set, "model.embed_tokens.weight") &&
                                                st_find(set, "embed_tokens.weight")));
  }
  if (set) st_close(set);
  free(c);
  return emb;
}

/* What a request's name refers to: a command-line entry, else a repo in the Hub cache. Fills the
 * directory and the kind (1 embedding). Runs without the lock (it reads the disk). A repo id is
 * resolved on its own (refs/main, one snapshot): a name that ends in a 404 costs a few stat calls,
 * never a scan of the whole cache, whatever a client sends. */
static int lookup(struct srv *s, const char *name, char *dir, size_t cap, int *embedding,
                  int *forced, int *http_status, struct hearth_err *err) {
  *forced = 0;
  for (int i = 0; i < s->n_entries; i++) {
    const struct srv_entry *e = &s->entries[i];
    if (strcmp(e->id, name)) continue;
    int rc = hub_resolve(e->src, dir, cap, err);
    if (rc) { *http_status = 500; return rc; }
    *forced = e->embedding;
    *embedding = e->embedding || guess_embedding(dir);
    return 0;
  }
  *http_status = 404;
  if (!srv_valid_repo_id(name) || is_dir(name)) /* never a local path named by a client */
    return err_set(err, HEARTH_ERR_IO, "the model '%s' does not exist", name);
  struct hearth_err e2 = {0};
  if (hub_resolve_repo(name, dir, cap, &e2))
    return err_set(err, HEARTH_ERR_IO, "the model '%s' does not exist (it is not in the Hugging "
                   "Face cache: `hearth pull %s` or POST /v1/models/pull)", name, name);
  *embedding = guess_embedding(dir);
  return 0;
}

/* The resident models of kind k not being unloaded, counting only loads claimed before self. */
static int resident(struct srv *s, int k, const struct srv_model *self) {
  int n = 0;
  for (int i = 0; i < s->n_models; i++) {
    const struct srv_model *m = &s->models[i];
    if (m == self || m->embedding != k) continue;
    n += m->state == SLOT_READY || (m->state == SLOT_LOADING && m->load_seq < self->load_seq);
  }
  return n;
}

/* Makes room for self under its kind's limit: marks least recently used models UNLOADING, waits
 * for their references to end and frees them. Lock held (released while freeing). */
static void make_room(struct srv *s, struct srv_model *self) {
  int k = self->embedding;
  while (resident(s, k, self) >= s->max_loaded[k]) {
    struct srv_model *victim = NULL;
    for (int i = 0; i < s->n_models; i++) {
      struct srv_model *m = &s->models[i];
      /* a model with requests waiting to take it is skipped: they get their turn first */
      if (m->state == SLOT_READY && m->embedding == k && !m->waiters &&
          (!victim || m->last_used < victim->last_used))
        victim = m;
    }
    if (!victim) { pthread_cond_wait(&s->reg_cv, &s->reg_mu); continue; }
    victim->state = SLOT_UNLOADING;
    if (s->opt->verbose || victim->refs)
      fprintf(stderr, "hearth serve: unloading %s to load %s%s\n", victim->id, self->id,
              victim->refs ? " (once its running requests finish)" : "");
    while (victim->refs) pthread_cond_wait(&s->reg_cv, &s->reg_mu);
    victim->state = SLOT_CLOSING;
    pthread_mutex_unlock(&s->reg_mu);
    model_close(victim);
    pthread_mutex_lock(&s->reg_mu);
    victim->state = SLOT_EMPTY;
    pthread_cond_broadcast(&s->reg_cv);
  }
}

/* Takes a reference on a READY slot. Lock held. */
static void take(struct srv *s, struct srv_model *m) {
  m->refs++;
  m->last_used = ++s->use_clock;
}

/* srv_model_acquire, and with wait 0 srv_model_try_acquire: SRV_ACQUIRE_PENDING where the first
 * would wait (for a load, an unload or a free slot) or load. */
static int acquire(struct srv *s, const char *name, int wait, struct srv_model **out,
                   int *http_status, struct hearth_err *err) {
  *out = NULL;
  if (!name || !*name || strlen(name) >= sizeof s->models[0].id) {
    *http_status = 400;
    return err_set(err, HEARTH_ERR_ARG, "'model' must be a model id");
  }
  char dir[1024];
  int embedding = 0, forced = 0, looked_up = 0;
  pthread_mutex_lock(&s->reg_mu);
  for (;;) {
    struct srv_model *m = find_live(s, name);
    if (m && m->state == SLOT_READY) {
      take(s, m);
      pthread_mutex_unlock(&s->reg_mu);
      *out = m;
      return 0;
    }
    if (m && !wait) {
      pthread_mutex_unlock(&s->reg_mu);
      return SRV_ACQUIRE_PENDING;
    }
    if (m && m->state == SLOT_LOADING) {
      m->waiters++;
      while (m->state == SLOT_LOADING) pthread_cond_wait(&s->reg_cv, &s->reg_mu);
      m->waiters--;
      pthread_cond_broadcast(&s->reg_cv); /* a loader may wait for waiters to be gone */
      if (m->state == SLOT_READY) {
        take(s, m);
        pthread_mutex_unlock(&s->reg_mu);
        *out = m;
        return 0;
      }
      /* FAILED: every waiter answers the loader's error; the last one frees the slot */
      err_set(err, HEARTH_ERR_IO, "%s", m->load_err);
      if (!m->waiters) m->state = SLOT_EMPTY;
      pthread_mutex_unlock(&s->reg_mu);
      *http_status = 500;
      return HEARTH_ERR_IO;
    }
    if (m) { /* UNLOADING or CLOSING: wait until it is gone, then load it again */
      pthread_cond_wait(&s->reg_cv, &s->reg_mu);
      continue;
    }
    if (!looked_up) { /* not loaded: find it on disk, without the lock */
      pthread_mutex_unlock(&s->reg_mu);
      int rc = lookup(s, name, dir, sizeof dir, &embedding, &forced, http_status, err);
      if (rc) return rc;
      if (!wait) return SRV_ACQUIRE_PENDING; /* it exists: loading it is the caller's next step */
      looked_up = 1;
      pthread_mutex_lock(&s->reg_mu);
      continue; /* someone may have started loading it meanwhile */
    }
    struct srv_model *slot = NULL;
    for (int i = 0; i < SRV_MAX_SLOTS && !slot; i++)
      if (s->models[i].state == SLOT_EMPTY) slot = &s->models[i];
    if (!slot) { pthread_cond_wait(&s->reg_cv, &s->reg_mu); continue; }
    if (slot - s->models >= s->n_models) s->n_models = (int)(slot - s->models) + 1;
    snprintf(slot->id, sizeof slot->id, "%s", name);
    snprintf(slot->path, sizeof slot->path, "%s", dir);
    slot->state = SLOT_LOADING;
    slot->refs = slot->waiters = 0;
    slot->embedding = embedding;
    slot->load_seq = ++s->load_clock;
    slot->load_err[0] = 0;
    make_room(s, slot);
    pthread_mutex_unlock(&s->reg_mu);
    fprintf(stderr, "hearth serve: loading %s (%s)\n", name, dir);
    double t0 = now_s();
    int rc = model_open(s->opt, slot, forced, err);
    pthread_mutex_lock(&s->reg_mu);
    if (rc) {
      snprintf(slot->load_err, sizeof slot->load_err, "%s", err->msg);
      slot->state = slot->waiters ? SLOT_FAILED : SLOT_EMPTY;
      *http_status = 500;
    } else {
      slot->embedding = slot->info->is_embedding; /* the guess from the files, corrected */
      slot->state = SLOT_READY;
      take(s, slot);
      fprintf(stderr, "hearth serve: loaded %s in %.1f s\n", name, now_s() - t0);
    }
    pthread_cond_broadcast(&s->reg_cv);
    pthread_mutex_unlock(&s->reg_mu);
    if (!rc) *out = slot;
    return rc;
  }
}

int srv_model_acquire(struct srv *s, const char *name, struct srv_model **out, int *http_status,
                      struct hearth_err *err) {
  return acquire(s, name, 1, out, http_status, err);
}

int srv_model_try_acquire(struct srv *s, const char *name, struct srv_model **out,
                          int *http_status, struct hearth_err *err) {
  return acquire(s, name, 0, out, http_status, err);
}

void srv_model_release(struct srv *s, struct srv_model *m) {
  pthread_mutex_lock(&s->reg_mu);
  if (--m->refs == 0) pthread_cond_broadcast(&s->reg_cv);
  pthread_mutex_unlock(&s->reg_mu);
}
