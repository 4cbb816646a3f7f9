/*
 * inproc.h — the in-process recovery contract between `ftc run --in-process`
 * (plugins/run.c, the supervisor) and a libftc-aware rank (`ftc train`).
 *
 * In in-process mode a rank that survives a failed generation is not killed:
 * it leaves its step loop, tears down its communicators and its ftc context,
 * waits for the assignment of the next generation and runs its init path
 * again in the same process. Two small files per local rank, in the job
 * directory, carry it (both written to PATH.tmp then renamed: a reader sees
 * a whole file or the previous one, never a torn one):
 *
 *   - the assignment file (FTC_ASSIGN_FILE, given to the rank once at its
 *     start), written by the supervisor: one KEY=VALUE per line, the
 *     environment a fresh rank of the new generation would get (RANK,
 *     WORLD_SIZE, MASTER_ADDR, MASTER_PORT, FTC_GENERATION,
 *     FTC_AGENT_SOCKET, FTC_RESTORE_RANK, FTC_PREV_WORLD_SIZE, ...). A
 *     variable a fresh rank would NOT get (FTC_RESTORE_RANK when the layout
 *     did not change) is listed as "KEY=" with the flag line "-KEY": the rank
 *     unsets it. FTC_GENERATION is mandatory.
 *   - the state file (FTC_ASSIGN_FILE.state), written by the rank: "pid=P
 *     gen=G phase=running|waiting why=TEXT". Its existence, with the rank's
 *     pid, tells the supervisor that the rank understands in-process mode
 *     (a binary that never writes it is stopped and restarted, as in restart
 *     mode); phase=waiting with the current generation tells it that the
 *     rank left the generation (its collective failed: the round failed).
 *
 * The supervisor tells a running rank to leave a generation with SIGUSR1,
 * queued (sigqueue) with the generation as its value: a rank only leaves
 * the generation named (a late signal never stops the next one). A plain
 * `kill -USR1` (not queued: Slurm's `--signal=USR1@N` warning, an operator)
 * is not a request: it is ignored (ftc_inproc_ignored_signal says so).
 *
 * Error codes: FTC_EIO (file system), FTC_EPROTO (a malformed file),
 * FTC_ETIMEDOUT (no newer assignment before the deadline), FTC_EINVAL.
 * Thread-safety: the functions touch only their arguments and the files,
 * except ftc_inproc_apply (setenv: call it with no other thread reading the
 * environment) and the SIGUSR1 handler's state (one per process).
 */
#ifndef FTC_PLUGINS_INPROC_H
#define FTC_PLUGINS_INPROC_H

#include "core/clock.h"
#include "core/err.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FTC_INPROC_MAX_VARS 48
#define FTC_INPROC_LINE_MAX 4352

typedef enum ftc_inproc_phase {
    FTC_INPROC_RUNNING = 0, /* in its generation's init path or step loop */
    FTC_INPROC_WAITING = 1, /* left generation `gen`, waits for an assignment */
} ftc_inproc_phase_t;

typedef struct ftc_inproc_state {
    pid_t pid;
    uint64_t gen;
    ftc_inproc_phase_t phase;
    char why[256];
} ftc_inproc_state_t;

/* An assignment: n "KEY=VALUE" lines (and "-KEY" unset lines). */
typedef struct ftc_inproc_assign {
    uint64_t gen; /* its FTC_GENERATION */
    int n;
    char line[FTC_INPROC_MAX_VARS][FTC_INPROC_LINE_MAX];
} ftc_inproc_assign_t;

/* Supervisor: writes vars[0..n) (each "KEY=VALUE" or "-KEY") atomically to
 * path. One of them must be FTC_GENERATION=G. */
int ftc_inproc_assign_write(const char *path, char *const *vars, int n, ftc_err_t *err);

/* Parses the text of an assignment file (what names it in errors): lines
 * "KEY=VALUE" or "-KEY" shorter than FTC_INPROC_LINE_MAX, at most
 * FTC_INPROC_MAX_VARS of them, one FTC_GENERATION=G; empty lines skipped.
 * FTC_EPROTO naming the bad line. */
int ftc_inproc_assign_parse(const char *text, size_t len, const char *what,
                            ftc_inproc_assign_t *a, ftc_err_t *err);
/* Reads path into a (FTC_ENOENT when absent, FTC_EPROTO when malformed). */
int ftc_inproc_assign_read(const char *path, ftc_inproc_assign_t *a, ftc_err_t *err);

/* Rank: polls path until it holds an assignment newer than after_gen (or
 * *cancel is set: FTC_ECANCELED; or dl passes: FTC_ETIMEDOUT, naming the
 * file and the generation waited for). */
int ftc_inproc_assign_wait(const char *path, uint64_t after_gen, ftc_deadline_t dl,
                           volatile sig_atomic_t *cancel, ftc_inproc_assign_t *a, ftc_err_t *err);

/* Rank: setenv of every KEY=VALUE, unsetenv of every -KEY. */
int ftc_inproc_apply(const ftc_inproc_assign_t *a, ftc_err_t *err);

/* Both: the state file is state_path = assign_path + ".state". */
void ftc_inproc_state_path(const char *assign_path, char *buf, size_t cap);
int ftc_inproc_state_write(const char *state_path, const ftc_inproc_state_t *st, ftc_err_t *err);
/* FTC_ENOENT when absent (a rank that does not know in-process mode). */
int ftc_inproc_state_read(const char *state_path, ftc_inproc_state_t *st, ftc_err_t *err);
/* Parses the state file's line, "pid=P gen=G phase=running|waiting why=TEXT"
 * (pure: what ftc_inproc_state_read does with the line it read). */
bool ftc_inproc_state_parse(const char *line, ftc_inproc_state_t *st);

/* Rank: installs the SIGUSR1 handler (SA_SIGINFO | SA_RESTART). It records
 * the generation the supervisor asked to leave, and calls on_leave(arg)
 * (which must be async-signal-safe: e.g. ftc_coll_abort of the rank's
 * communicators) when that is the current generation or a newer one (the rank
 * is behind: it leaves too). Only a queued SIGUSR1 (si_code SI_QUEUE) is a
 * request; another is recorded and otherwise ignored. */
int ftc_inproc_install(void (*on_leave)(void *arg), void *arg, ftc_err_t *err);
/* The sender of a SIGUSR1 that was not a leave request (a plain kill), since
 * the last call: its pid, -1 when unknown, 0 when there was none. */
int ftc_inproc_ignored_signal(void);
/* The generation the rank runs now (the handler compares against it). */
void ftc_inproc_set_generation(uint64_t gen);
/* Has the supervisor asked to leave the current generation (or a newer one)? */
bool ftc_inproc_leave_requested(void);

/* Supervisor: asks the rank pid to leave generation gen (sigqueue SIGUSR1). */
int ftc_inproc_signal(pid_t pid, uint64_t gen);

#ifdef __cplusplus
}
#endif
#endif
