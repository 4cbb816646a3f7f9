/*
 * cli_agent_opts.c — the agent's settings from the configuration, shared by
 * `ftc agent` and `ftc run` (which runs an agent per node).
 */
#include "cli/cli.h"

#include <string.h>

int ftc_cli_agent_options(ftc_cli_args_t *a, ftc_agent_options_t *o, ftc_err_t *err)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->version = 1;
    const char *red = ftc_config_str(a->cfg, FTC_CFG_REDUNDANCY);
    if (ftc_redundancy_parse(red, &o->redundancy, err))
        return FTC_EINVAL;
    const char *busy = ftc_config_str(a->cfg, FTC_CFG_CKPT_BUSY);
    if (strcmp(busy, "wait") && strcmp(busy, "skip"))
        return ftc_err_set(err, FTC_EINVAL, "checkpoint.busy is '%s': use wait or skip", busy);
    o->busy_policy = strcmp(busy, "skip") ? FTC_BUSY_WAIT : FTC_BUSY_SKIP;
    o->max_inflight = (int)ftc_config_int(a->cfg, FTC_CFG_CKPT_INFLIGHT);
    o->hang_min_ms = (int)ftc_config_int(a->cfg, FTC_CFG_DETECT_HANG_MS);
    o->start_ms = (int)ftc_config_int(a->cfg, FTC_CFG_DETECT_START_MS);
    if (o->start_ms == 0)
        o->start_ms = -1; /* none (0 in the agent's options is the default) */
    o->ttl_ms = (int)ftc_config_int(a->cfg, FTC_CFG_DETECT_TTL_MS);
    const char *prov = ftc_config_str(a->cfg, FTC_CFG_FABRIC_PROVIDER);
    o->provider = prov[0] ? prov : NULL;
    o->persist_dir = ftc_config_str(a->cfg, FTC_CFG_PERSIST_DIR);
    o->persist_every = (int)ftc_config_int(a->cfg, FTC_CFG_PERSIST_EVERY);
    ftc_persist_options_t po = FTC_PERSIST_OPTIONS_INIT;
    ftc_persist_options_from_config(&po, a->cfg);
    po.fault = &a->fault;
    o->persist = po;
    o->timeout_ms = (int)ftc_config_int(a->cfg, FTC_CFG_AGENT_TIMEOUT);
    return 0;
}
