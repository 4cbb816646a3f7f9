/*
 * status.h — a snapshot of a job's control plane for `ftc status` and the
 * event stream reader for `ftc events`.
 *
 * The snapshot reads members, heartbeats (their age and remaining TTL), the
 * leader lease, the generation, the committed step and the newest events.
 * Garbage in any key does not abort it: the problem is recorded next to the
 * member (or in `problems`) and shown.
 *
 * Not thread-safe per control handle.
 */
#ifndef FTC_DETECT_STATUS_H
#define FTC_DETECT_STATUS_H

#include "detect/control.h"

#include <stdio.h>

typedef struct ftc_status_member {
    char node[FTC_CTL_NODE_MAX + 1];
    char host[128];
    char domain[64];
    long long pid;
    unsigned long long joined_ms;
    bool alive;             /* heartbeat key present */
    ftc_ctl_heartbeat_t hb; /* valid when alive and problem is empty */
    long long hb_age_ms;    /* now - hb.wall_ms */
    long long hb_ttl_ms;    /* PTTL of the heartbeat key */
    char problem[160];      /* "" or what is wrong with its keys */
} ftc_status_member_t;

typedef struct ftc_status_event {
    char id[32];      /* stream id */
    char kind[24];
    char node[FTC_CTL_NODE_MAX + 1];
    int rank;         /* -1: none, or not a whole number in range where it was read */
    long long gen;    /* -1: not a whole number in range */
    long long step;   /* -1: none, or not a number */
    unsigned long long t_detect_ms; /* 0: none, or not a number */
    char detail[256];
} ftc_status_event_t;

/* Sets the field named k of an event from its stream value v (pure: one
 * field/value pair of an events-stream entry); unknown fields are skipped. A
 * number is taken only whole and in range: anything else sets the field's
 * "unknown" (above), never another number. */
void ftc_status_event_field(ftc_status_event_t *e, const char *k, const char *v);

typedef struct ftc_status {
    char job[64];
    unsigned long long now_ms;
    uint64_t generation;
    uint32_t world;
    char leader[192]; /* "" = none */
    uint64_t epoch;
    int64_t leader_ttl_ms;
    int64_t committed_step; /* -1 = none */
    uint64_t committed_gen;
    int n_members;
    ftc_status_member_t *members;
    int n_events;
    ftc_status_event_t *events; /* newest last */
    char problems[512];         /* key-level problems, "; "-separated */
    char events_problem[256];   /* "" or why the event stream could not be read (also in
                                   problems): `ftc events` fails with it */
} ftc_status_t;

/* Reads a snapshot (max_events newest events). FTC_EREDIS etc. only when
 * Redis cannot be read at all. */
int ftc_status_collect(ftc_ctl_t *c, const char *job, int max_events, ftc_status_t **out);
void ftc_status_free(ftc_status_t *s); /* NULL is a no-op */
/* Human-readable table. */
void ftc_status_print(const ftc_status_t *s, FILE *out);
/* JSON text (malloc'd; caller frees), NULL on out of memory. */
char *ftc_status_json(const ftc_status_t *s);

/* Reads events after stream id `after` ("0" = from the start, "$" = only new
 * ones), waiting up to block_ms for the first (0 = do not wait). Calls fn for
 * each; copies the last id read into after (cap >= 32). "$" is replaced by
 * the stream's newest id at once ("0-0" when it is empty), even when nothing
 * is read, so a caller that reads again misses nothing added in between.
 * Returns the number read or an error. */
typedef void (*ftc_status_event_fn)(void *arg, const ftc_status_event_t *e);
int ftc_events_read(ftc_ctl_t *c, char *after, size_t cap, int count, int block_ms,
                    ftc_status_event_fn fn, void *arg);
/* One line per event, as `ftc events` prints it. */
void ftc_event_print(const ftc_status_event_t *e, FILE *out);
/* The same as one compact JSON object per line (`ftc events --json`): the
 * fields of ftc_status_json's "events" entries. */
void ftc_event_print_json(const ftc_status_event_t *e, FILE *out);

#endif
