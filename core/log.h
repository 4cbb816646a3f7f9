/*
 * log.h — leveled log lines with a timestamp and a node/rank prefix.
 *
 *   2026-11-30T05:20:01.123Z ftc[node0/r3] WARN persist: step 120 failed ...
 *
 * The sink (stderr), the level and the prefix are process-wide: they are set
 * once by main() (ftc_log_configure) before threads start, and read after.
 * This is the one piece of process-wide state in ftc, kept because a log line
 * is written from places (threads, signal-free cleanup paths) that hold no
 * context. FTC_LOG_LEVEL=debug|info|warn|error|off overrides the default
 * (never a level given on the command line: see ftc_log_set_level).
 * Writing a line is thread-safe (one write(2) per line).
 */
#ifndef FTC_CORE_LOG_H
#define FTC_CORE_LOG_H

enum ftc_log_level {
    FTC_LOG_DEBUG = 0,
    FTC_LOG_INFO = 1,
    FTC_LOG_WARN = 2,
    FTC_LOG_ERROR = 3,
    FTC_LOG_OFF = 4,
};

/* Sets the minimum level and the prefix shown after "ftc[" (e.g. "node0/r3").
 * level is the program's default: a valid FTC_LOG_LEVEL replaces it; a level
 * < 0 keeps the current one (to set only the prefix). prefix may be NULL
 * (keeps the current). Call before starting threads. */
void ftc_log_configure(int level, const char *prefix);
/* Sets the minimum level as given, FTC_LOG_LEVEL notwithstanding: for a level
 * that already ranks the environment below the command line (the CLI's
 * log.level config: --log-level over FTC_LOG_LEVEL over the file). Later
 * ftc_log_configure(-1, prefix) calls keep it. Call before starting threads. */
void ftc_log_set_level(int level);
/* Parses "debug", "info", "warn", "error", "off"; -1 if unknown. */
int ftc_log_level_parse(const char *s);
int ftc_log_level(void);
void ftc_log(int level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define FTC_DEBUG(mod, ...) ftc_log(FTC_LOG_DEBUG, mod, __VA_ARGS__)
#define FTC_INFO(mod, ...) ftc_log(FTC_LOG_INFO, mod, __VA_ARGS__)
#define FTC_WARN(mod, ...) ftc_log(FTC_LOG_WARN, mod, __VA_ARGS__)
#define FTC_ERROR(mod, ...) ftc_log(FTC_LOG_ERROR, mod, __VA_ARGS__)

#endif
