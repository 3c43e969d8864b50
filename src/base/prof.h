/* base/prof.h — where a server's wall-clock time goes, for finding bottlenecks without a profiler
 * (the GPU machine has no Nsight Systems). Off unless HEARTH_PROFILE is set in the environment;
 * then every PROF_* span adds its seconds and units to a process-wide counter, and prof_dump
 * prints the table (hearth serve does at shutdown). Spans are wall time of the calling thread:
 * spans of different threads overlap, so the column is "where threads waited", not a partition. */
#ifndef HEARTH_BASE_PROF_H
#define HEARTH_BASE_PROF_H
#include <stdio.h>

enum prof_slot {
  PROF_TOKENIZE,      /* text -> ids on the HTTP threads (units: tokens) */
  PROF_ENGINE_STEP,   /* hearth_sessions_step_select in the engine (units: tokens) */
  PROF_ENGINE_POST,   /* the engine's per-sequence work after a step: scoring, sampling, emitting (units: rows) */
  PROF_LABELS,        /* label scoring after a prompt (units: prompts) */
  PROF_FWD_ENQUEUE,   /* uploading a batch and enqueuing its forward (units: tokens) */
  PROF_FWD_WAIT,      /* reading a forward's outputs back, sync included (units: rows) */
  PROF_EMBED_PASS,    /* one packed embedding pass (units: tokens) */
  PROF_EMBED_ROUND,   /* one round of the embedding queue (units: inputs) */
  PROF_PREPARE,       /* hearth_session_prepare in the engine: prefix match, cache and disk attach (units: tokens held) */
  PROF_STORE_READ,    /* the disk prefix cache's readers filling a run of blocks (units: blocks) */
  PROF_STORE_UPLOAD,  /* that run's upload to the backend (units: blocks) */
  PROF_STEP_BLOCKS,   /* a step's checks and KV block allocation before its forwards (units: sessions) */
  PROF_STEP_KEY,      /* a step's prefix-cache keying of the blocks it completed (units: sessions) */
  PROF_N
};

int prof_on(void);
double prof_now(void); /* seconds, monotonic; 0 when profiling is off (so spans cost one branch) */
void prof_add(enum prof_slot s, double t0, long units);
void prof_dump(FILE *f);
#endif
