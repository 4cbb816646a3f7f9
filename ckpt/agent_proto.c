/*
 * agent_proto.c — see agent_proto.h.
 */
#include "ckpt/agent_proto.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>

void ftc_ap_init(ftc_ap_msg_t *m, int type)
{
    memset(m, 0, sizeof *m);
    m->magic = FTC_AP_MAGIC;
    m->version = FTC_AP_VERSION;
    m->type = (uint16_t)type;
    m->src = -1;
}

int ftc_ap_check(const ftc_ap_msg_t *m, size_t len, ftc_err_t *err)
{
    /* magic and version first: they keep their offsets in every version, so
     * a side of another ftc build is named as such, not as a bad length */
    if (len < 8 || m->magic != FTC_AP_MAGIC)
        return ftc_err_set(err, FTC_EPROTO, "agent message of %zu bytes with bad magic %#x "
                           "(not an ftc rank or agent?)", len, len >= 4 ? m->magic : 0u);
    /* (version 0 is none: a truncated message, said as such below) */
    if (m->version != FTC_AP_VERSION && (m->version != 0 || len == sizeof *m))
        return ftc_err_set(err, FTC_EPROTO,
                           "agent protocol version %u on the other side, %d on this one: the "
                           "ranks (libftc) and `ftc agent` come from different ftc builds; run "
                           "both from the same build (restart the agents, or relink the trainer)",
                           m->version, FTC_AP_VERSION);
    if (len != sizeof *m)
        return ftc_err_set(err, FTC_EPROTO, "agent message of %zu bytes, expected %zu", len,
                           sizeof *m);
    if (m->type == 0 || m->type >= FTC_AP__MAX)
        return ftc_err_set(err, FTC_EPROTO, "agent message of unknown type %u", m->type);
    bool terminated = memchr(m->job, 0, sizeof m->job) && memchr(m->text, 0, sizeof m->text);
    for (int s = 0; s < FTC_AP_SLOTS_PER_RANK; s++)
        terminated = terminated && memchr(m->name[s], 0, sizeof m->name[s]);
    if (!terminated)
        return ftc_err_set(err, FTC_EPROTO, "agent message with an unterminated string");
    if (m->slot >= FTC_AP_SLOTS_PER_RANK)
        return ftc_err_set(err, FTC_EPROTO, "agent message names slot %u (0..%d)", m->slot,
                           FTC_AP_SLOTS_PER_RANK - 1);
    return 0;
}

static int ftc__wait(int fd, short ev, int timeout_ms, ftc_err_t *err, const char *what)
{
    struct pollfd p = {fd, ev, 0};
    for (;;) {
        int n = poll(&p, 1, timeout_ms);
        if (n > 0)
            return 0;
        if (n == 0)
            return ftc_err_set(err, FTC_ETIMEDOUT, "%s: no answer within %d ms", what, timeout_ms);
        if (errno != EINTR)
            return ftc_err_errno(err, errno, "%s: poll", what);
    }
}

int ftc_ap_send(int fd, const ftc_ap_msg_t *m, int timeout_ms, ftc_err_t *err)
{
    int rc = ftc__wait(fd, POLLOUT, timeout_ms, err, "agent socket send");
    if (rc)
        return rc;
    for (;;) {
        ssize_t n = send(fd, m, sizeof *m, MSG_NOSIGNAL);
        if (n == (ssize_t)sizeof *m)
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        return ftc_err_errno(err, n < 0 ? errno : EIO, "agent socket send");
    }
}

int ftc_ap_send_now(int fd, const ftc_ap_msg_t *m, ftc_err_t *err)
{
    for (;;) {
        ssize_t n = send(fd, m, sizeof *m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n == (ssize_t)sizeof *m)
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return ftc_err_set(err, FTC_EAGAIN, "agent socket send: no room (its peer has not "
                               "read as much as the socket holds)");
        return ftc_err_errno(err, n < 0 ? errno : EIO, "agent socket send");
    }
}

int ftc_ap_recv(int fd, ftc_ap_msg_t *m, int timeout_ms, ftc_err_t *err)
{
    int rc = ftc__wait(fd, POLLIN, timeout_ms, err, "agent socket receive");
    if (rc)
        return rc;
    for (;;) {
        ssize_t n = recv(fd, m, sizeof *m, MSG_TRUNC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ftc_err_errno(err, errno, "agent socket receive");
        if (n == 0)
            return ftc_err_set(err, FTC_EIO, "agent socket: connection closed by the other side");
        return ftc_ap_check(m, (size_t)n, err);
    }
}
