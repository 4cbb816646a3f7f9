/*
 * fabric.h — a small, fault-aware libfabric transport: one reliable-datagram
 * (FI_EP_RDM) endpoint with tagged messages, peers in an address vector,
 * blocking and asynchronous send/receive, every wait bounded by a deadline and
 * an abort flag.
 *
 * It carries checkpoint replication (agent to agent) and the reference
 * trainer's CPU collectives. Simple use first:
 *
 *     ftc_fabric_opts_t o = FTC_FABRIC_OPTS_INIT;     // provider from FI_PROVIDER
 *     ftc_fabric_t *fab;                              //   or "tcp;ofi_rxm"
 *     ftc_err_t err = {0};
 *     if (ftc_fabric_open(&o, &fab, &err) < 0) ...    // err.msg names the provider
 *     uint8_t me[FTC_FABRIC_ADDR_MAX]; size_t melen = sizeof me;
 *     ftc_fabric_getname(fab, me, &melen);            // publish (e.g. via Redis)
 *     ftc_fabric_peer_t p;
 *     ftc_fabric_peer_add(fab, peer_addr, peer_len, &p);
 *     ftc_fabric_send(fab, p, tag, buf, len, ftc_deadline_in_ms(5000));
 *     ftc_fabric_recv(fab, FTC_FABRIC_PEER_ANY, tag, 0, buf, cap, &got, NULL, deadline);
 *     ftc_fabric_close(fab);
 *
 * Progress model: libfabric's tcp;ofi_rxm and shm providers progress data only
 * when the completion queue is read (FI_PROGRESS_MANUAL), so nothing moves
 * while no thread of this handle is inside a wait, a test or a post. Every
 * wait here busy-polls the completion queue (yielding the CPU after a short
 * spin), which is what gets line rate on loopback.
 *
 * Faults. libfabric does not report a dead peer or a cut link by itself: an
 * operation to such a peer may simply never complete. So every wait takes a
 * deadline. When it passes (or the handle is aborted), the wait cancels the
 * operations it was waiting for (fi_cancel) and waits, at most
 * opts.cancel_timeout_ms, for libfabric to hand each one back. Afterwards:
 *
 *   - every request in the set whose state is FTC_FABRIC_REQ_DONE is finished:
 *     libfabric will never touch its buffer again, the buffer is the caller's;
 *   - a request still FTC_FABRIC_REQ_PENDING could not be cancelled in time
 *     (rxm cannot cancel a send in flight, e.g. to a dead peer). The handle is
 *     then marked broken (ftc_fabric_health() returns FTC_EFABRIC), refuses
 *     new operations, and the buffers of pending requests stay lent to
 *     libfabric until ftc_fabric_close() returns. A broken handle never reads
 *     its completion queue again, so those requests stay PENDING (wait,
 *     cancel and test return FTC_EFABRIC at once). The caller closes the
 *     handle and opens a new one (with a new address) to carry on.
 *
 * The blocking calls (send, recv, send_large, recv_large) use internal
 * requests and follow the same rule: when they return, their buffers are the
 * caller's again unless ftc_fabric_health() says the handle is broken.
 *
 * Threads: a handle is used by one thread at a time (libfabric is opened with
 * FI_THREAD_DOMAIN). The exception is ftc_fabric_abort(), which any thread or
 * signal handler may call at any time. There is no process-wide state here.
 */
#ifndef FTC_CORE_FABRIC_H
#define FTC_CORE_FABRIC_H

#include "core/clock.h"
#include "core/err.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FTC_FABRIC_OPTS_VERSION 1

/* Options of ftc_fabric_open(). Start from FTC_FABRIC_OPTS_INIT. */
typedef struct ftc_fabric_opts {
    size_t size;          /* sizeof(ftc_fabric_opts_t), set by the INIT macro */
    int version;          /* FTC_FABRIC_OPTS_VERSION */
    const char *provider; /* "tcp;ofi_rxm", "shm", ...; NULL: $FI_PROVIDER, else
                             "tcp;ofi_rxm" */
    const char *bind_addr; /* local address for IP providers; NULL: $FTC_FABRIC_BIND,
                              else "127.0.0.1" (loopback); "": let the provider
                              pick. Ignored by shm */
    size_t max_msg;        /* largest single message (default 4 MiB); also the
                              chunk size of send_large/recv_large, which must be
                              the same on both sides */
    int window;            /* outstanding chunks in send_large/recv_large (8) */
    int cancel_timeout_ms; /* how long a wait that gave up waits for its
                              cancelled operations to come back (1000) */
    const atomic_bool *abort_flag; /* NULL, or the owner's stop flag: once it reads
                              true the handle acts as after ftc_fabric_abort()
                              (the flag must outlive the handle) */
} ftc_fabric_opts_t;

#define FTC_FABRIC_OPTS_INIT                                                                       \
    {                                                                                              \
        sizeof(ftc_fabric_opts_t), FTC_FABRIC_OPTS_VERSION, NULL, NULL, (size_t)4 << 20, 8, 1000,  \
            NULL                                                                                   \
    }

typedef struct ftc_fabric ftc_fabric_t;

/* A peer: an index into the handle's address vector (libfabric's fi_addr_t). */
typedef uint64_t ftc_fabric_peer_t;
#define FTC_FABRIC_PEER_ANY UINT64_MAX /* recv: from any peer */

/* Room for any provider's address (tcp: a sockaddr, shm: a name). */
#define FTC_FABRIC_ADDR_MAX 256

/* Opens a fabric, domain, completion queue, address vector and an enabled
 * RDM endpoint with FI_TAGGED | FI_MSG | FI_DIRECTED_RECV and send-after-send
 * ordering. opts may be NULL (defaults). On failure *out is NULL and err says
 * which provider and which libfabric call failed, with fi_strerror's text;
 * FTC_EUNSUPPORTED when the provider is absent or lacks these capabilities,
 * FTC_EFABRIC for other libfabric errors, FTC_EINVAL for bad options.
 * Thread-safe (opens an independent handle). */
int ftc_fabric_open(const ftc_fabric_opts_t *opts, ftc_fabric_t **out, ftc_err_t *err);

/* Closes the endpoint and everything under it, whatever state it is in
 * (broken, aborted, operations pending). After it returns libfabric holds no
 * caller buffer. On shm the endpoint's region (/dev/shm/<pid>:<n>:<m>) is
 * gone once it returns, also for a broken endpoint that is abandoned rather
 * than fi_close'd (docs/fabric.md). NULL is a no-op. Not thread-safe with
 * other calls on fab. */
void ftc_fabric_close(ftc_fabric_t *fab);
/* Shuts down (shutdown(2), the descriptors stay libfabric's) every socket of
 * this process bound to the endpoint's tcp address: its listener and the
 * connections it accepted. Peers that still use the address are refused at
 * once instead of connecting into a backlog nobody serves (ftc_fabric_close
 * does it for an endpoint it abandons; an owner that gives up on an endpoint
 * another thread is stuck in calls it). No-op for other providers. */
void ftc_fabric_shutdown_sockets(ftc_fabric_t *fab);
/* Removes the regions libfabric's shm provider named after process `pid`
 * (/dev/shm/<pid>:*, only names that start exactly with "<pid>:") and
 * returns how many it removed. A process killed (SIGKILL, a crash) never
 * closes its endpoints, so its regions stay until someone does this. Only
 * for a process that can no longer use them and whose number nobody else can
 * have: a dead child not yet reaped (seen with waitid(WEXITED | WNOWAIT); a
 * reaped pid may already be a new process's), or the caller itself before its
 * first shm endpoint (ftc_fabric_open does that). ftc_fabric_reap does it for
 * each child it reaps. */
int ftc_fabric_shm_remove(pid_t pid);
/* Removes the shm regions named after `pid` ("<pid>:*") whose mtime is
 * before started_ns (CLOCK_REALTIME ns, less a 50 ms margin): what a dead
 * process with the same pid left, not what a live one made since it started.
 * ftc_fabric_open calls it for its own pid, with the process's start time,
 * before its first shm endpoint, so the regions of another libfabric user in
 * the same process stay. The number removed. */
int ftc_fabric_shm_remove_stale(pid_t pid, int64_t started_ns);
/* Reaps a child as waitpid(pid, st, options) does (pid > 0, or -1 for any
 * child; options 0 or WNOHANG; the same return value and errno), after
 * removing the shm regions it left (ftc_fabric_shm_remove): its exit is seen
 * first with waitid(WEXITED | WNOWAIT), which leaves it a zombie, so until the
 * reap no new process can have its number and the names removed can only be
 * the dead child's. For every launcher whose children may use the shm
 * provider: `ftc run`'s supervisor (its ranks) and --simulate-nodes launcher
 * (its node supervisors, which hold the agent's and the file store's
 * endpoints), and `ftc train --nproc` (its ranks). */
pid_t ftc_fabric_reap(pid_t pid, int *st, int options);

/* Makes every current and later wait on fab return FTC_ECANCELED promptly
 * (after the bounded cancel described above), and every later post fail with
 * FTC_ECANCELED. Sticky: the handle is done; close it and open a new one.
 * Thread-safe and async-signal-safe (one atomic store), but fab must still be
 * open: a signal handler that may run while (or after) the owner closes the
 * handle sets the owner's opts.abort_flag instead, which outlives it. */
void ftc_fabric_abort(ftc_fabric_t *fab);

/* 0 while usable; FTC_ECANCELED once aborted; FTC_EFABRIC once broken (an
 * operation could not be cancelled, or the completion queue failed).
 * Thread-safe. */
int ftc_fabric_health(const ftc_fabric_t *fab);

/* The provider actually opened ("tcp;ofi_rxm", "shm"). Valid until close. */
const char *ftc_fabric_provider(const ftc_fabric_t *fab);

/* The largest single message this handle sends or receives (opts.max_msg,
 * at most the provider's limit, which open checked). Thread-safe. */
size_t ftc_fabric_max_msg(const ftc_fabric_t *fab);

/* The detail of the last error on fab ("" if none). Valid until the next call
 * on fab. Not thread-safe. */
const char *ftc_fabric_errmsg(const ftc_fabric_t *fab);

/* Copies the endpoint's address (fi_getname) into addr, *len in: its room,
 * out: the address length. FTC_ERANGE (with *len = the size needed) when the
 * room is too small. The bytes are opaque; give them to a peer's
 * ftc_fabric_peer_add. Not thread-safe. */
int ftc_fabric_getname(ftc_fabric_t *fab, void *addr, size_t *len);

/* Inserts a peer's address into the address vector; *peer is its handle.
 * rxm connects on the first send, not here, so a wrong or dead address is
 * only noticed by a transfer that times out. FTC_EINVAL (and *peer untouched)
 * for a NULL address, a len of 0 or above FTC_FABRIC_ADDR_MAX, or a socket
 * address shorter than its family's sockaddr: libfabric is never made to
 * read past len. Not thread-safe. */
int ftc_fabric_peer_add(ftc_fabric_t *fab, const void *addr, size_t len, ftc_fabric_peer_t *peer);

/* Removes a peer (closes rxm's connection to it). Operations to it that are
 * still pending should be waited for or cancelled first. Not thread-safe. */
int ftc_fabric_peer_remove(ftc_fabric_t *fab, ftc_fabric_peer_t peer);

/* ---- asynchronous operations ------------------------------------------- */

enum ftc_fabric_req_state {
    FTC_FABRIC_REQ_IDLE = 0,    /* never posted (zeroed) */
    FTC_FABRIC_REQ_PENDING = 1, /* posted; libfabric owns the buffer */
    FTC_FABRIC_REQ_DONE = 2,    /* finished; status says how; buffer is the caller's */
};

/* One operation. Caller-allocated (stack, array, embedded in a bigger struct)
 * and zeroed before its first use (a DONE request may be posted again); it
 * must stay valid and unmoved while PENDING. Fields below `tag_out` are
 * private. */
typedef struct ftc_fabric_req {
    void *prov_[8];      /* libfabric's struct fi_context2: must stay first */
    int state;           /* enum ftc_fabric_req_state */
    int status;          /* when DONE: 0, or FTC_ETIMEDOUT / FTC_ECANCELED (cancelled),
                            FTC_ETRUNC (message longer than the buffer), FTC_EFABRIC */
    size_t len;          /* when DONE: bytes sent or received */
    uint64_t tag_out;    /* when DONE (recv): the tag of the message received */
    int kind_;           /* private: 1 send, 2 recv */
    int prov_errno_;     /* private: provider errno of a failed completion */
    struct ftc_fabric *fab_; /* private: the owning handle */
} ftc_fabric_req_t;

/* Posts a tagged send of len <= opts.max_msg bytes to peer. buf must stay
 * untouched until req is DONE. -FI_EAGAIN from libfabric (rxm connecting, queue
 * full) is handled by progressing and retrying until the deadline: then
 * FTC_ETIMEDOUT and nothing was posted (req zeroed). The calling thread is
 * held that long: an event loop uses ftc_fabric_isend_try instead. Returns
 * 0 when posted (req PENDING); FTC_EINVAL for len > max_msg; FTC_ECANCELED /
 * FTC_EFABRIC per health. Not thread-safe. */
int ftc_fabric_isend(ftc_fabric_t *fab, ftc_fabric_req_t *req, ftc_fabric_peer_t peer,
                     uint64_t tag, const void *buf, size_t len, ftc_deadline_t deadline);

/* Posts a tagged receive into buf (room cap) for a message from peer
 * (FTC_FABRIC_PEER_ANY: any) whose tag matches `tag` on every bit not set in
 * `ignore`. Messages that match one receive are delivered in the order they
 * were sent by one peer. Same returns as isend. Not thread-safe. */
int ftc_fabric_irecv(ftc_fabric_t *fab, ftc_fabric_req_t *req, ftc_fabric_peer_t peer,
                     uint64_t tag, uint64_t ignore, void *buf, size_t cap,
                     ftc_deadline_t deadline);

/* Non-blocking posts, for an event loop that drives many transfers from one
 * thread (the replication engine): like isend / irecv, but -FI_EAGAIN (rxm
 * still connecting to the peer — forever when nobody listens at its address
 * — or a queue full) is retried only a few times, progressing once before
 * each retry, for at most about 1 ms. Then FTC_EAGAIN: nothing was posted,
 * req is exactly as the caller handed it in (never PENDING), buf is the
 * caller's; post again later (progress in between: rxm's connection moves
 * only while the completion queue is read). Giving up on a post that keeps
 * returning FTC_EAGAIN is the caller's call, by its own deadline. Other
 * returns as isend / irecv (0: posted, req PENDING). Not thread-safe. */
int ftc_fabric_isend_try(ftc_fabric_t *fab, ftc_fabric_req_t *req, ftc_fabric_peer_t peer,
                         uint64_t tag, const void *buf, size_t len);
int ftc_fabric_irecv_try(ftc_fabric_t *fab, ftc_fabric_req_t *req, ftc_fabric_peer_t peer,
                         uint64_t tag, uint64_t ignore, void *buf, size_t cap);

/* Progresses and returns 1 if req is DONE, 0 if still pending, or <0 when the
 * handle is unusable. Never cancels. Not thread-safe. */
int ftc_fabric_test(ftc_fabric_t *fab, ftc_fabric_req_t *req);

/* Waits until every request in reqs[0..n) is DONE. Returns 0 if all succeeded;
 * the first failed request's status if one failed (the others are still
 * waited for); FTC_ETIMEDOUT at the deadline or FTC_ECANCELED on abort, after
 * cancelling the rest as described at the top (per-request status says which
 * completed). IDLE requests are skipped. Not thread-safe. */
int ftc_fabric_wait(ftc_fabric_t *fab, ftc_fabric_req_t *const *reqs, size_t n,
                    ftc_deadline_t deadline);

/* Cancels the pending requests in reqs[0..n) and waits up to
 * opts.cancel_timeout_ms for them to come back; marks the handle broken and
 * returns FTC_EFABRIC if one did not. 0 otherwise. Not thread-safe. */
int ftc_fabric_cancel(ftc_fabric_t *fab, ftc_fabric_req_t *const *reqs, size_t n);

/* ---- blocking operations (isend/irecv + wait) -------------------------- */

/* Sends len <= max_msg bytes and waits for the local completion (the buffer
 * is reusable; it does not prove the peer consumed it). */
int ftc_fabric_send(ftc_fabric_t *fab, ftc_fabric_peer_t peer, uint64_t tag, const void *buf,
                    size_t len, ftc_deadline_t deadline);

/* Receives one message into buf (room cap); *got (may be NULL) gets its
 * length and *tag_out (may be NULL) its tag. FTC_ETRUNC if it was longer
 * than cap (on shm only for a message within its inline size: a longer one
 * makes libfabric 1.17 spin inside fi_cq_read past the deadline; give every
 * receive room for the longest message the peer may send, docs/fabric.md). */
int ftc_fabric_recv(ftc_fabric_t *fab, ftc_fabric_peer_t peer, uint64_t tag, uint64_t ignore,
                    void *buf, size_t cap, size_t *got, uint64_t *tag_out,
                    ftc_deadline_t deadline);

/* Sends len bytes (any size) as len / max_msg + 1 messages with the same
 * tag (the last one shorter than max_msg, empty when len is a multiple of
 * it: it marks the end), keeping opts.window of them in flight. The receiver
 * must call recv_large with the same len, tag and max_msg. */
int ftc_fabric_send_large(ftc_fabric_t *fab, ftc_fabric_peer_t peer, uint64_t tag,
                          const void *buf, size_t len, ftc_deadline_t deadline);

/* Receives exactly len bytes sent by send_large from peer (FTC_FABRIC_PEER_ANY
 * only if one sender uses this tag). A sender's len that differs is an error,
 * never a silent prefix: FTC_EPROTO at once, naming both lengths (a sender
 * that sent more has its remaining chunks taken, up to its end, so its
 * send_large completes); FTC_ETRUNC only if the sender's max_msg is larger.
 * Allocates max_msg bytes for the call when len is not a multiple of it
 * (FTC_ENOMEM). On error buf's contents are unspecified. */
int ftc_fabric_recv_large(ftc_fabric_t *fab, ftc_fabric_peer_t peer, uint64_t tag, void *buf,
                          size_t len, ftc_deadline_t deadline);

#ifdef __cplusplus
}
#endif
#endif
