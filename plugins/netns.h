/*
 * netns.h — a private network for `ftc run --simulate-nodes N --netns`: each
 * simulated node in a network namespace of its own, all joined to one bridge
 * in the root namespace, so drills get real network faults (a node's link
 * down, iptables DROP inside its namespace) on one machine.
 *
 * Layout (names unique per run: T is the creating process's pid in hex):
 *   bridge  fb<T>, address 10.A.B.1/24 in the root namespace
 *   node i  namespace ftc-<T>-n<i>, eth0 = 10.A.B.(i+2)/24, lo up, default
 *           route via the bridge; its veth's root-namespace end is fv<T>n<i>,
 *           a port of the bridge (`ip link set fv<T>n<i> down` cuts node i
 *           off from Redis and from every peer)
 * 10.A.B.0/24 is a /24 no interface of the root namespace has an address in
 * when the network is made (A in 200..249). The addresses exist only on the
 * bridge and inside the namespaces. DIR/netns lists them, one line per node:
 *   node I ns NAME veth HOSTVETH addr ADDR
 * and a last line "bridge NAME addr ADDR".
 *
 * Cleanup: ftc_netns_create forks a watchdog that waits on a pipe only the
 * creator holds; when the creator closes it (ftc_netns_destroy) or dies in
 * any way (SIGKILL included), the watchdog kills the processes still in the
 * namespaces (a node cut off may still run), deletes the namespaces, the
 * veths and the bridge, and exits. The watchdog ignores SIGINT, SIGTERM and
 * SIGHUP so that a Ctrl-C of the job does not take it before it cleaned.
 * No iptables rule is made (the host's FORWARD policy must let the bridge's
 * traffic through when br_netfilter is loaded: docs/recovery.md).
 *
 * Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN: `ip netns add` mounts) and
 * iproute2's `ip`; ftc_netns_check says which is missing (FTC_EUNSUPPORTED,
 * FTC_ENOENT). Every `ip` command is bounded (10 s, then SIGKILL).
 *
 * Thread-safety: one owner; create and destroy from the process that runs
 * the nodes, enter from a child after fork (single-threaded).
 */
#ifndef FTC_PLUGINS_NETNS_H
#define FTC_PLUGINS_NETNS_H

#include "core/err.h"
#include "detect/redis.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FTC_NETNS_MAX_NODES 250

typedef struct ftc_netns ftc_netns_t;

/* Whether this process can make namespaces: root (or CAP_NET_ADMIN and
 * CAP_SYS_ADMIN) and `ip` on PATH or in /usr/sbin, /sbin. 0, or FTC_EUNSUPPORTED /
 * FTC_ENOENT with err saying what is missing. */
int ftc_netns_check(ftc_err_t *err);

/* Makes the bridge and n (1..FTC_NETNS_MAX_NODES) namespaces, writes
 * DIR/netns, starts the watchdog. NULL with err (the `ip` command that
 * failed and what it said); what was made is removed again. */
ftc_netns_t *ftc_netns_create(const char *dir, int n, ftc_err_t *err);

/* In node i's process (a child of the creator, after fork, before any
 * thread): closes its copy of the watchdog's pipe, moves into namespace i
 * (setns) and sets FTC_FABRIC_BIND to its address (core/fabric.h), so its
 * agent, filestore and ranks bind their endpoints there. */
int ftc_netns_enter(ftc_netns_t *net, int i, ftc_err_t *err);

/* Makes the job's Redis reachable from the namespaces. embedded: the job's
 * own redis-server (detect/redis_server.h), which listens on loopback only:
 * it is told to listen on the bridge address too (CONFIG SET bind), and
 * *node_url becomes the bridge address with its port and password. Not
 * embedded (--redis URL): a loopback host is refused (FTC_EINVAL: the
 * namespaces cannot reach it); another address of this machine is reached
 * through the bridge (default route), *node_url = *url. */
int ftc_netns_expose_redis(ftc_netns_t *net, const ftc_redis_url_t *url, bool embedded,
                           ftc_redis_url_t *node_url, ftc_err_t *err);

/* Node i's address, namespace name and root-side veth; the bridge's. */
const char *ftc_netns_addr(const ftc_netns_t *net, int i);
const char *ftc_netns_name(const ftc_netns_t *net, int i);
const char *ftc_netns_veth(const ftc_netns_t *net, int i);
const char *ftc_netns_bridge(const ftc_netns_t *net);
const char *ftc_netns_bridge_addr(const ftc_netns_t *net);

/* Closes the watchdog's pipe and waits (up to 30 s) for it to have removed
 * everything; frees net. NULL is a no-op. Call after the nodes were reaped:
 * processes still in a namespace are killed with SIGKILL. */
void ftc_netns_destroy(ftc_netns_t *net);

#ifdef __cplusplus
}
#endif
#endif
