/*
 * envprobe_main.c — a training binary for test_run_env.sh that only reports
 * what `ftc run` gave it: one line
 *   PROBE RANK=.. LOCAL_RANK=.. ... PWFILE_OK=0|1 SOCKET_OK=0|1 ARGS=..
 * with the launcher's variables ("-" for an unset one), whether
 * FTC_AGENT_SOCKET is a Unix socket that exists, and its arguments
 * (ARGS=a,b,c; "-" for none), and whether FTC_REDIS_PASSWORD_FILE is a
 * non-empty file this rank can read and nobody else can (PWFILE_OK). Written with one write(2)
 * so the lines of ranks sharing a stdout do not interleave. Exits 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    static const char *const names[] = {
        "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
        "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "FTC_RANK", "FTC_WORLD_SIZE", "FTC_JOB_ID",
        "FTC_GENERATION", "FTC_NODE_RANK", "FTC_AGENT_SOCKET", "GROUP_WORLD_SIZE", "ROLE_NAME",
        "ROLE_WORLD_SIZE", "OMP_NUM_THREADS", "FTC_REDIS_URL", "FTC_REDIS_PASSWORD_FILE",
        "FTC_RESTORE_RANK", "FTC_PREV_WORLD_SIZE", "FTC_ASSIGN_FILE", "FTC_ASSIGN_TIMEOUT_MS",
        "FTC_TRAIN_RDZV_DIR", "FTC_CKPT_DIR", "TORCHELASTIC_ERROR_FILE",
        "TORCHELASTIC_USE_AGENT_STORE", NULL};
    char line[8192];
    size_t n = (size_t)snprintf(line, sizeof line, "PROBE");
    for (int i = 0; names[i] && n < sizeof line; i++) {
        const char *v = getenv(names[i]);
        n += (size_t)snprintf(line + n, sizeof line - n, " %s=%s", names[i], v && *v ? v : "-");
    }
    const char *sock = getenv("FTC_AGENT_SOCKET");
    struct stat st;
    int ok = sock && stat(sock, &st) == 0 && S_ISSOCK(st.st_mode);
    /* the Redis password file: readable by this rank, by nobody else */
    const char *pwf = getenv("FTC_REDIS_PASSWORD_FILE");
    int pw_ok = pwf && stat(pwf, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
                (st.st_mode & 077) == 0 && access(pwf, R_OK) == 0;
    if (n < sizeof line)
        n += (size_t)snprintf(line + n, sizeof line - n, " PWFILE_OK=%d", pw_ok);
    if (n < sizeof line)
        n += (size_t)snprintf(line + n, sizeof line - n, " SOCKET_OK=%d ARGS=%s", ok,
                              argc > 1 ? "" : "-");
    for (int i = 1; i < argc && n < sizeof line; i++)
        n += (size_t)snprintf(line + n, sizeof line - n, "%s%s", i > 1 ? "," : "", argv[i]);
    if (n < sizeof line)
        n += (size_t)snprintf(line + n, sizeof line - n, "\n");
    if (n >= sizeof line)
        return 1;
    return write(1, line, n) == (ssize_t)n ? 0 : 1;
}
