/* tools/cmd_pull.c — `hearth pull ORG/NAME [--revision REV]`: a model's inference files from the
 * Hub ($HF_ENDPOINT) into the local Hub cache, with a progress bar on a terminal (bytes, rate and
 * ETA for the file and the whole pull) and plain lines otherwise (a log, a pipe). */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "load/hub_pull.h"

struct view {
  int tty;
  double t0, t_file, t_last;   /* start of the pull, of the current file, of the last line */
  uint64_t base_all;           /* bytes already in the cache when the transfer began */
  uint64_t base_file;          /* the current file's bytes at its start (a resumed .incomplete) */
  char file[256];
  int last_decile;             /* plain lines: the last tenth of the file reported */
};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static void human(double b, char *out, size_t cap) {
  const char *u[] = {"B", "kB", "MB", "GB", "TB"};
  int i = 0;
  while (b >= 1000 && i < 4) { b /= 1000; i++; }
  snprintf(out, cap, i ? "%.1f %s" : "%.0f %s", b, u[i]);
}

static void eta(double rate, uint64_t left, char *out, size_t cap) {
  if (left == 0) { snprintf(out, cap, "0:00"); return; }
  if (rate <= 0) { snprintf(out, cap, "--:--"); return; }
  double d = left / rate;
  int s = d > 359999 ? 359999 : (int)d; /* at most 99:59:59 */
  if (s >= 3600) snprintf(out, cap, "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  else snprintf(out, cap, "%d:%02d", s / 60, s % 60);
}

static int on_progress(const struct hub_progress *p, void *arg) {
  struct view *v = arg;
  double t = now_s();
  if (!p->file) {
    if (!strcmp(p->status, "resolving")) { printf("resolving...\n"); fflush(stdout); }
    return 0;
  }
  if (strcmp(v->file, p->file)) { /* a new file */
    if (v->tty && v->file[0]) putchar('\n');
    snprintf(v->file, sizeof v->file, "%s", p->file);
    v->t_file = t;
    v->base_file = p->completed;
    v->last_decile = -1;
    if (!v->base_all) v->base_all = p->all_completed - p->completed + 1; /* +1: 0 means unset */
  }
  int end = p->completed == p->total;
  if (v->tty && !end && t - v->t_last < 0.1) return 0;
  v->t_last = t;
  /* rates over less than a fifth of a second say nothing (a small file arrives in one read) */
  double rf = t - v->t_file > 0.2 ? (double)(p->completed - v->base_file) / (t - v->t_file) : 0;
  double ra = t - v->t0 > 0.2 ? (double)(p->all_completed - (v->base_all - 1)) / (t - v->t0) : 0;
  char done[24], total[24], rate[24], e[24], all[24], alltot[24], ea[24];
  human((double)p->completed, done, sizeof done);
  human((double)p->total, total, sizeof total);
  if (rf > 0) human(rf, rate, sizeof rate);
  else snprintf(rate, sizeof rate, "-");
  eta(rf, p->total - p->completed, e, sizeof e);
  human((double)p->all_completed, all, sizeof all);
  human((double)p->all_total, alltot, sizeof alltot);
  eta(ra, p->all_total - p->all_completed, ea, sizeof ea);
  int pct = p->total ? (int)(100 * p->completed / p->total) : 100;
  int apct = p->all_total ? (int)(100 * p->all_completed / p->all_total) : 100;
  if (v->tty) {
    char bar[21];
    for (int i = 0; i < 20; i++) bar[i] = i < pct / 5 ? '=' : ' ';
    bar[20] = 0;
    printf("\r\033[K%-28.28s [%s] %3d%% %9s/%-9s %9s/s ETA %s | all %3d%% %s/%s ETA %s", p->file, bar, pct, done, total,
           rate, e, apct, all, alltot, ea);
  } else {
    int decile = pct / 10;
    if (decile == v->last_decile && !(end && strcmp(p->status, "verifying") == 0)) return 0;
    if (end && v->last_decile == 10) return 0;
    v->last_decile = end ? 10 : decile;
    printf("%s %s %s/%s (%d%%) %s/s, all %s/%s (%d%%) ETA %s\n", p->status, p->file, done, total, pct, rate, all, alltot,
           apct, ea);
  }
  fflush(stdout);
  return 0;
}

int cmd_pull(int argc, char **argv) {
  const char *repo = NULL, *rev = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--revision") && i + 1 < argc) rev = argv[++i];
    else if (argv[i][0] != '-' && !repo) repo = argv[i];
    else {
      fprintf(stderr, "usage: hearth pull ORG/NAME [--revision REV]\n"
                      "  downloads the model's inference files into the Hugging Face cache\n"
                      "  ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub) from $HF_ENDPOINT\n"
                      "  (default https://huggingface.co), with $HF_TOKEN or $HF_HOME/token for gated models\n");
      return 2;
    }
  }
  if (!repo) { fprintf(stderr, "usage: hearth pull ORG/NAME [--revision REV]\n"); return 2; }
  struct view v = {.tty = isatty(1), .t0 = now_s()};
  struct hub_pull_opts o = {.revision = rev, .progress = on_progress, .progress_arg = &v};
  struct hearth_err err = {0};
  char dir[2048];
  int rc = hub_pull(repo, &o, dir, sizeof dir, &err);
  if (v.tty && v.file[0]) putchar('\n');
  if (rc) { fflush(stdout); fprintf(stderr, "hearth pull: %s\n", err.msg); return 1; }
  printf("pulled %s into %s\n", repo, dir);
  return 0;
}
