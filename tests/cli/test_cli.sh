#!/usr/bin/env bash
# test_cli.sh — drives the built `ftc` binary end to end: help and usage
# errors (exit 0 / 2), config flags and FTC_* environment (a flag the command
# does not read is a warning naming it, for every command that does not read
# them all), inspect / verify of
# a good and of corrupted shard files (exit 0 / 1 with a reason naming the
# offset), synth -> corrupt the newest version -> verify names it -> restore
# falls back to the previous step, export to safetensors read by Python, and
# (as root) a really full disk under the persist tier.
#
# usage: test_cli.sh PATH/TO/ftc
set -u
FTC=${1:?usage: test_cli.sh PATH/TO/ftc}
# the project's Python (.venv from scripts/setup, with safetensors + numpy)
PY=${FTC_PYTHON:-python3}
[ -x "$PY" ] || PY=python3
BASE=${FTC_TEST_TMP:-/tmp}
mkdir -p "$BASE"
T=$(mktemp -d "$BASE/cli-XXXXXX")
trap 'rm -rf "$T"' EXIT
fails=0
n=0

# expect CODE DESCRIPTION -- CMD...: runs CMD, keeps stdout/stderr in $T/out, $T/err
expect() {
    local want=$1 what=$2
    shift 3
    n=$((n + 1))
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ "$rc" -ne "$want" ]; then
        echo "FAIL: $what: exit $rc, expected $want: $*"
        sed 's/^/  stdout: /' "$T/out" | head -20
        sed 's/^/  stderr: /' "$T/err" | head -20
        fails=$((fails + 1))
        return 1
    fi
    echo "ok: $what"
}
# grep_in FILE REGEX DESCRIPTION
grep_in() {
    n=$((n + 1))
    if grep -Eq -- "$2" "$T/$1"; then
        echo "ok: $3"
    else
        echo "FAIL: $3: /$2/ not in $1:"
        sed 's/^/  /' "$T/$1" | head -20
        fails=$((fails + 1))
    fi
}

# warns_only CMD "--FLAG (key)": $T/err has one "is ignored" warning of ftc CMD, about that flag
warns_only() {
    n=$((n + 1))
    if [ "$(grep -c "warning: .* is ignored by ftc $1" "$T/err")" = 1 ] &&
        grep -qxF -- "ftc $1: warning: $2 is ignored by ftc $1" "$T/err"; then
        echo "ok: $1 warns about ${2%% *} only"
    else
        echo "FAIL: $1 warns about ${2%% *} only:"; sed 's/^/  /' "$T/err"; fails=$((fails + 1))
    fi
}

# flip one byte of FILE at OFFSET
flip() {
    local b
    b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
    printf "$(printf '\\%03o' $(((b + 1) % 256)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# ---- help and usage ----------------------------------------------------------
expect 0 "ftc --help" -- "$FTC" --help
grep_in out "inspect" "--help lists the commands"
expect 0 "ftc --version" -- "$FTC" --version
grep_in out "^ftc [0-9]+\.[0-9]+\.[0-9]+" "--version prints the version"
for c in inspect verify export synth restore status events redis clean agent train run; do
    n=$((n + 1))
    k=$("$FTC" help "$c" 2>&1 | grep -c "^Common options:")
    if [ "$k" = 1 ]; then echo "ok: ftc help $c: the common options once"; else
        echo "FAIL: ftc help $c prints the common options $k times"; fails=$((fails + 1)); fi
done
# the help gives each option's range as the parser checks it, and says what it does (events
# --count applies with --follow too; ftc run sets FTC_NODE_RANK); the --rdzv-conf error lists
# every key it takes and ignores
while IFS='|' read -r c re; do
    expect 0 "ftc help $c" -- "$FTC" help "$c"
    grep_in out "$re" "ftc help $c gives ${re%% *}"
done <<'EOF'
status|--interval MS +--watch's period \(default 1000, 50\.\.3600000\)
status|--events N .*\(default 10, 0\.\.1000\)
events|--count N +the last N events \(default 100, 1\.\.100000\); with --follow,
clean|--force +remove the keys even while the job looks alive
clean|^usage: ftc clean \[--force\] \[--redis URL\] \[--job ID\]
synth|--steps N .*\(required, 1\.\.1000000\)
synth|--ranks R .*\(default 1, 1\.\.4096\)
agent|--nodes N +agents in the job \(1\.\.4096\)
agent|--ranks-per-node R +local ranks \(default 1, 1\.\.64\)
agent|--persist-every M .*1\.\.1000000
run|FTC_GENERATION FTC_NODE_RANK FTC_AGENT_SOCKET
run|N 1\.\.4096, at most --nnodes MAX
run|more than 3600000 waits 3600000
run|^Exit 3 \(besides the codes below\): this node was cut off
EOF
expect 2 "ftc run --rdzv-conf foo=1" -- "$FTC" run --rdzv-conf foo=1 -- /bin/true
grep_in err "keep_alive_interval \(or heartbeat\), .*use_libuv, store_type\)" \
    "the unknown --rdzv-conf key's error lists heartbeat and store_type too"
expect 0 "ftc help verify" -- "$FTC" help verify
grep_in out "usage: ftc verify" "help CMD prints its usage"
expect 0 "ftc export --help" -- "$FTC" export --help
grep_in out "usage: ftc export" "CMD --help prints its usage"
expect 0 "ftc help config" -- "$FTC" help config
grep_in out "--persist-keep" "help config lists config flags"
grep_in out "^  --job-id .*\(also --job\)" "help config gives --job, the short spelling of --job-id"
expect 2 "no command" -- "$FTC"
grep_in err "usage: ftc" "no command prints usage"
expect 2 "unknown command" -- "$FTC" frobnicate
grep_in err "unknown command 'frobnicate'" "unknown command is named"
grep_in err "usage: ftc" "unknown command prints usage"
expect 2 "unknown flag" -- "$FTC" inspect --frobnicate x
grep_in err "unknown option '--frobnicate'" "unknown flag is named"
grep_in err "usage: ftc inspect" "unknown flag prints usage"
expect 2 "missing argument" -- "$FTC" verify
expect 2 "extra argument" -- "$FTC" verify a b
expect 2 "bad config flag value" -- "$FTC" synth --out "$T/x" --steps 1 --persist-level 99
grep_in err "persist" "bad config value names the key"
expect 2 "bad FTC_* environment" -- env FTC_PERSIST_KEEP=zero "$FTC" synth --out "$T/x" --steps 1
grep_in err "FTC_PERSIST_KEEP" "bad environment names the variable"
printf '{"persist": {"kep": 3}}' >"$T/bad.json"
expect 2 "unknown key in --config file" -- "$FTC" synth --out "$T/x" --steps 1 --config "$T/bad.json"
grep_in err "kep" "bad config file names the key"
expect 2 "a --config file that does not exist" -- "$FTC" synth --out "$T/x" --steps 1 \
    --config "$T/none.json"
grep_in err "--config .*none.json: open" "a missing --config file names the flag"
# a --config FIFO (or a password file that is one) waited for a writer for ever; a second
# --config dropped the first without a word
mkfifo "$T/fifo.json"
expect 2 "a --config FIFO" -- timeout 20 "$FTC" verify "$T" --config "$T/fifo.json"
grep_in err "^ftc verify: --config .*fifo.json: .*fifo.json: not a regular file" \
    "it is refused at once, named"
expect 1 "FTC_REDIS_PASSWORD_FILE naming a FIFO" -- env FTC_REDIS_PASSWORD_FILE="$T/fifo.json" \
    timeout 20 "$FTC" status --redis redis://127.0.0.1:1
grep_in err "^ftc status: FTC_REDIS_PASSWORD_FILE .*fifo.json: not a regular file" \
    "it is refused at once, named"
rm -f "$T/fifo.json"
expect 2 "an empty --config" -- "$FTC" verify "$T" --config ""
grep_in err "^ftc verify: --config is empty: give a JSON file" "its error says so"
expect 2 "--config twice" -- "$FTC" verify "$T" --config "$T/cfg1.json" --config "$T/cfg2.json"
grep_in err "^ftc verify: --config given twice \('.*cfg1.json', then '.*cfg2.json'\): give one" \
    "its error names both files"
expect 2 "synth without --steps" -- "$FTC" synth --out "$T/x"
# torchrun's spellings, in the parser every command shares: underscores and --name=VALUE
expect 2 "bad config flag value, spelled --persist_level=99" -- "$FTC" synth --out "$T/x" \
    --steps=1 --persist_level=99
grep_in err "persist" "the underscore spelling is the config flag (its key is named)"
expect 0 "synth --out=DIR --steps=1 --persist_keep=2 (underscores, =VALUE)" -- \
    "$FTC" synth --out="$T/us" --steps=1 --ranks=1 --bytes=64KiB --persist_keep=2
expect 2 "an unknown option with underscores is still unknown" -- "$FTC" inspect --frob_nicate x
grep_in err "unknown option '--frob_nicate'" "the unknown option is named as given"
# ftc clean: listed by --help; a flag it does not take or an argument is a usage error (2), before
# any Redis is asked; a Redis that does not answer is a failure (1) naming it, within its timeouts
expect 0 "ftc --help" -- "$FTC" --help
grep_in out "^  clean +remove a finished job's keys from Redis" "--help lists clean"
expect 2 "ftc clean --frobnicate" -- \
    timeout 60 "$FTC" clean --frobnicate --redis redis://127.0.0.1:1
grep_in err "unknown option '--frobnicate'" "clean names the unknown flag"
grep_in err "usage: ftc clean" "and prints its usage"
expect 2 "ftc clean with an argument" -- timeout 60 "$FTC" clean myjob --redis redis://127.0.0.1:1
expect 2 "ftc clean --force=1 (a flag takes no value)" -- \
    timeout 60 "$FTC" clean --force=1 --redis redis://127.0.0.1:1
expect 1 "ftc clean with nothing listening at --redis" -- \
    timeout 60 "$FTC" clean --job clicl$$ --redis redis://127.0.0.1:1
grep_in err "^ftc clean: .*unreachable" "its error says Redis is unreachable"
expect 1 "ftc clean with no Redis known for the job" -- \
    env -u FTC_REDIS_URL timeout 60 "$FTC" clean --job clicl$$ --job-dir "$T/cleanjob"
grep_in err "^ftc clean: .*--redis URL" "its error says what to pass"
expect 2 "export without a format" -- "$FTC" export a b
expect 1 "inspect of a missing path" -- "$FTC" inspect "$T/nope"

# ---- synth, then a raw shard -------------------------------------------------
P=$T/persist
printf '{"persist": {"keep": 5}}' >"$T/cfg.json"
expect 0 "synth 3 steps x 2 ranks" -- "$FTC" synth --out "$P" --steps 3 --ranks 2 --bytes 256KiB \
    --config "$T/cfg.json" --persist-full-every 8
grep_in out "^v1: raw .* full" "synth v1 is full"
grep_in out "^v3: raw .*ratio [0-9.]+x, delta" "synth v3 is a delta"
expect 0 "inspect persist dir" -- "$FTC" inspect "$P"
grep_in out "v3 +committed" "inspect lists v3 committed"
expect 0 "inspect persist dir --json" -- "$FTC" inspect --json "$P"
n=$((n + 1))
if "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["kind"]=="persist" and [v["step"] for v in d["versions"]]==[3,2,1], d' "$T/out"; then
    echo "ok: inspect --json parses"
else
    echo "FAIL: inspect --json"; fails=$((fails + 1))
fi
expect 0 "restore newest to a raw shard" -- "$FTC" restore "$P" --out "$T/good.shard" --rank 1
grep_in out "restored step 3" "restore takes the newest"
expect 0 "inspect good shard" -- "$FTC" inspect "$T/good.shard"
grep_in out "coordinates d1.t0.p0" "inspect shows coordinates"
grep_in out "wte +fp32 +\[" "inspect shows the tensor table"
grep_in out "data.cursor +8 bytes +u64 3" "inspect shows u64 metadata"
expect 0 "verify good shard" -- "$FTC" verify "$T/good.shard"
# a setting given as a flag that the command does not read was accepted without a word: now a
# warning naming flag and command; none for one it reads (restore: fault) nor for log.level
expect 0 "verify with --persist-keep 4 (not read by verify)" -- \
    "$FTC" verify "$T/good.shard" --persist-keep 4
grep_in err "^ftc verify: warning: --persist-keep \(persist\.keep\) is ignored by ftc verify$" \
    "verify warns that --persist-keep is ignored"
expect 0 "restore with --job-id x --fault rename:99 --log-level info" -- "$FTC" restore "$P" \
    --out "$T/warn.shard" --rank 1 --job-id x --fault rename:99 --log-level info
warns_only restore "--job-id (job.id)"
# the other commands that read only some settings: each given one it does not read (first),
# then the ones it reads (none warned about); the warning comes before any usage error or
# connection failure (status and events: nothing listens on port 1; redis: the job already has
# one; agent: no --nodes), so nothing is started. ftc run reads every setting.
mkdir -p "$T/wj" && echo "redis://127.0.0.1:1/0" >"$T/wj/redis.url"
RU=redis://127.0.0.1:1
while IFS='|' read -r code args warned; do
    read -ra wargv <<<"$args"
    expect "$code" "ftc $args" -- "$FTC" "${wargv[@]}"
    warns_only "${wargv[0]}" "$warned"
done <<EOF
0|synth --out $T/ws --steps 1 --bytes 64KiB --redundancy 2 --persist-keep 2 --persist-level 3 \
--persist-dir $T/wsd --job-id x --fault rename:99 --log-level info|--redundancy (redundancy)
1|status --persist-keep 4 --redis $RU --job-id x --job-dir $T/wj|--persist-keep (persist.keep)
1|events --detect-ttl-ms 500 --redis $RU --job x --job-dir $T/wj|--detect-ttl-ms (detect.ttl_ms)
1|redis --agent-timeout-ms 500 --job-id x --job-dir $T/wj|--agent-timeout-ms (agent.timeout_ms)
1|clean --persist-keep 4 --force --redis $RU --job-id x \
--job-dir $T/wj|--persist-keep (persist.keep)
2|agent --ckptdir-quiet-ms 5 --redundancy 1 --persist-keep 2 --persist-every 3 \
--agent-timeout-ms 500 --detect-ttl-ms 500 --fabric-provider tcp --job-id x --job-dir $T/wj \
--redis $RU|--ckptdir-quiet-ms (ckptdir.quiet_ms)
EOF
expect 0 "inspect good shard --json" -- "$FTC" inspect "$T/good.shard" --json
n=$((n + 1))
if "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["step"]==3 and d["coordinates"]["dp_rank"]==1 and d["ok"] and len(d["tensors"])>4, d' "$T/out"; then
    echo "ok: shard --json parses"
else
    echo "FAIL: shard --json"; fails=$((fails + 1))
fi

# corrupt one payload byte: a tensor checksum fails, naming the byte range
cp "$T/good.shard" "$T/bad-payload.shard"
size=$(stat -c %s "$T/bad-payload.shard")
flip "$T/bad-payload.shard" $((size / 2))
expect 1 "verify payload-corrupted shard" -- "$FTC" verify "$T/bad-payload.shard"
grep_in err "CORRUPT: tensor [0-9]+ '.*': checksum mismatch over bytes [0-9]+\.\.[0-9]+" \
    "verify names the tensor and byte range"
expect 1 "inspect payload-corrupted shard" -- "$FTC" inspect "$T/bad-payload.shard"
grep_in out "BAD" "inspect marks the bad tensor"
grep_in err "checksum mismatch over bytes" "inspect gives the reason"
# corrupt a header byte (the step field): named by its offset
cp "$T/good.shard" "$T/bad-head.shard"
flip "$T/bad-head.shard" 24
expect 1 "verify header-corrupted shard" -- "$FTC" verify "$T/bad-head.shard"
grep_in err "offset [0-9]+" "verify names the offset"
expect 1 "inspect header-corrupted shard" -- "$FTC" inspect "$T/bad-head.shard"
printf 'not a shard at all' >"$T/junk.bin"
expect 1 "verify a junk file" -- "$FTC" verify "$T/junk.bin"
grep_in err "no FTCSHARD magic" "junk file: says it is not a shard"
# a huge junk file (sparse, 1 TiB) was read whole first: "cannot allocate 1099511627776 bytes"
# sent the user after memory; it is rejected by its first bytes, as the small one
if truncate -s 1T "$T/huge.bin" 2>/dev/null; then
    for c in inspect verify; do
        expect 1 "$c a 1 TiB junk file" -- timeout 60 "$FTC" "$c" "$T/huge.bin"
        grep_in err "huge.bin: .*not a valid .ftcz file: magic at offset 0 is wrong" \
            "$c: says it is neither a shard nor an .ftcz, by its magic"
    done
    expect 1 "export a 1 TiB junk file" -- timeout 60 "$FTC" export --safetensors "$T/huge.bin" \
        "$T/huge.safetensors"
    grep_in err "huge.bin .*no FTCSHARD magic.*magic at offset 0 is wrong" "export: says so too"
    rm -f "$T/huge.bin"
else
    echo "skip: a 1 TiB sparse file (the file system does not take it)"
fi

# ---- .ftcz files -------------------------------------------------------------
V1=$(ls -d "$P"/v*1 | head -1)
expect 0 "inspect full .ftcz" -- "$FTC" inspect "$V1/shard-d0-t0-p0.ftcz"
grep_in out "delta +none" "full .ftcz is decoded"
grep_in out "wte" "full .ftcz shows tensors"
expect 0 "verify full .ftcz" -- "$FTC" verify "$V1/shard-d0-t0-p0.ftcz"
# a delta .ftcz in a version directory is decoded itself, against its base:
# a corrupt copy beside a good version (not in its manifest) was called "ok
# (verified with its version)" because only the version's own files were read
V2=$(ls -d "$P"/v*2 | head -1)
expect 0 "verify delta .ftcz in its version dir" -- "$FTC" verify "$V2/shard-d0-t0-p0.ftcz"
grep_in out "ok \(a delta against step 1, verified" "the delta is verified"
cp "$V2/shard-d0-t0-p0.ftcz" "$V2/stray.ftcz"
flip "$V2/stray.ftcz" $(($(stat -c %s "$V2/stray.ftcz") - 100))
expect 1 "verify a corrupt delta .ftcz beside a good version" -- "$FTC" verify "$V2/stray.ftcz"
grep_in err "stray.ftcz: CORRUPT: .*chunk [0-9]+" "it names the file and the chunk"
rm -f "$V2/stray.ftcz"
expect 0 "inspect version dir" -- "$FTC" inspect "$V1"
grep_in out "shard-d1-t0-p0.ftcz" "version dir lists shard files"

# ---- export ------------------------------------------------------------------
expect 0 "export raw shard" -- "$FTC" export --safetensors "$T/good.shard" "$T/one.safetensors"
expect 1 "export --step of another step on a single shard file" -- \
    "$FTC" export --safetensors "$T/good.shard" "$T/wrong.safetensors" --step 2
grep_in err "single shard file of step 3, but step 2 was asked for" "it names both steps"
test ! -e "$T/wrong.safetensors" && echo "ok: nothing written" || { echo "FAIL: wrote OUT"; fails=$((fails + 1)); }
expect 0 "export --step of its own step on a single shard file" -- \
    "$FTC" export --safetensors "$T/good.shard" "$T/own.safetensors" --step 3
expect 0 "export persist dir" -- "$FTC" export --safetensors "$P" "$T/all.safetensors" --step 2
grep_in out "exported step 2: 2 shard" "export --step picks the version"
n=$((n + 1))
if "$PY" - "$T/one.safetensors" "$T/all.safetensors" <<'PY'
import sys
from safetensors import deserialize
one = dict(deserialize(open(sys.argv[1], 'rb').read()))
allt = dict(deserialize(open(sys.argv[2], 'rb').read()))
assert 'wte' in one and 'd1.t0.p0/wte' in allt and 'd0.t0.p0/wte' in allt, (list(one)[:3], list(allt)[:3])
PY
then
    echo "ok: python safetensors reads both exports"
else
    echo "FAIL: python safetensors read (run scripts/setup to install safetensors)"; fails=$((fails + 1))
fi

# ---- a writer at work in the directory: the reading commands leave it be ----
# (they used to open it as a writer, which removes every temp file it finds:
# a live agent's or trainer's shard being written vanished before its rename)
sleep 300 &
WPID=$!
W4=$P/v00000000000000000004
mkdir -p "$W4"
printf 'half a shard' >"$W4/.shard-d0-t0-p0.ftcz.tmp.$WPID"
printf 'half' >"$P/.x.tmp.$WPID"
expect 0 "inspect beside a writer at work" -- "$FTC" inspect "$P"
expect 0 "verify beside a writer at work" -- "$FTC" verify "$P"
expect 0 "restore beside a writer at work" -- "$FTC" restore "$P" --out "$T/busy.shard"
expect 0 "export beside a writer at work" -- "$FTC" export --safetensors "$P" "$T/busy.safetensors"
expect 0 "the writer's temp files are still there" -- \
    test -f "$W4/.shard-d0-t0-p0.ftcz.tmp.$WPID" -a -f "$P/.x.tmp.$WPID"
kill "$WPID" 2>/dev/null
wait "$WPID" 2>/dev/null
rm -rf "$W4" "$P/.x.tmp.$WPID"

# OUT of export / restore in a version directory, or the input itself: a committed version's
# file was replaced (restore --out DIR/vN/shard-...ftcz: every version from vN on corrupt) and
# export PATH PATH overwrote the shard it read; both are usage errors now, before any read
V2=$P/v00000000000000000002
expect 2 "restore --out onto a committed version's file" -- \
    "$FTC" restore "$P" --out "$V2/shard-d0-t0-p0.ftcz"
grep_in err "^ftc restore: --out .*shard-d0-t0-p0.ftcz is in the version directory .*v0+2: " \
    "its error names --out and the version directory"
expect 2 "export into a version directory" -- "$FTC" export --safetensors "$P" "$V2/m.safetensors"
expect 0 "nothing was written there" -- test ! -e "$V2/m.safetensors"
expect 0 "the persist directory still verifies" -- "$FTC" verify "$P"
grep_in out "^v2: ok" "its v2 is intact"
cp "$T/good.shard" "$T/self.shard"
expect 2 "export of a shard onto itself" -- "$FTC" export --safetensors "$T/self.shard" \
    "$T/self.shard"
grep_in err "OUT .*self.shard is the input .*self.shard itself" "its error says OUT is the input"
expect 0 "the shard still verifies" -- "$FTC" verify "$T/self.shard"
expect 2 "restore --out a directory" -- "$FTC" restore "$P" --out "$T"
grep_in err "^ftc restore: --out .* is a directory: give a file name" "its error says so"
expect 2 "export to an empty OUT" -- "$FTC" export --safetensors "$P" ""
grep_in err "^ftc export: OUT is empty: give a file name" "its error names OUT"
expect 1 "export into a directory that does not exist" -- "$FTC" export --safetensors "$P" \
    "$T/nodir/m.safetensors"
grep_in err "^ftc export: OUT .*nodir/m.safetensors: its directory .*nodir: No such file or \
directory \(create it first\)" "its error names OUT, the directory and what to do"

# a persist directory named like v2 is a persist directory, not a version
# (only "v" + 20 digits is one): it was read as version 2 of its parent
expect 0 "synth into a directory named v2" -- "$FTC" synth --out "$T/exp/v2" --steps 1 --ranks 1 \
    --bytes 64KiB
expect 0 "verify a persist directory named v2" -- "$FTC" verify "$T/exp/v2"
grep_in out "^v1: ok" "it verifies its version 1"
expect 0 "restore from a persist directory named v2" -- "$FTC" restore "$T/exp/v2" \
    --out "$T/exp.shard"
grep_in out "restored step 1" "it restores its step 1"
expect 0 "inspect a persist directory named v2" -- "$FTC" inspect "$T/exp/v2"
grep_in out "^persist directory" "inspect lists it as a persist directory"

# a version directory that cannot be read (no permission) was reported as "CORRUPT: COMMITTED
# marker unreadable or not matching MANIFEST.json": now UNREADABLE, with the system's reason
# (as a user without the permission: root reads it anyway, so root runs it as nobody)
AS=()
if [ "$(id -u)" = 0 ]; then
    command -v setpriv >/dev/null && AS=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
if [ "$(id -u)" != 0 ] || [ ${#AS[@]} -gt 0 ]; then
    PR=$T/permdir
    mkdir -p "$PR"
    cp -r "$P"/v*1 "$P"/v*2 "$PR"/
    chmod a+rx "$T" && chmod -R a+rX "$PR" && chmod 000 "$PR"/v*2
fi
# (nobody must reach the directory and the binary: not so under a home directory of mode 700)
if [ -d "${PR:-}" ] && "${AS[@]}" test -r "$PR"/v*1/MANIFEST.json -a -x "$FTC"; then
    expect 1 "verify with a version directory it may not read" -- "${AS[@]}" "$FTC" verify "$PR"
    grep_in out "^v2: UNREADABLE: .*v0+2/COMMITTED: Permission denied" \
        "it says the version is unreadable, and why"
    grep_in out "^v1: ok" "the other version verifies"
    grep_in err "1 of 2 committed version\(s\) corrupt or unreadable" "the summary says so"
else
    echo "skip: unreadable version (root without setpriv, or the test directory out of reach)"
fi

[ -d "${PR:-}" ] && chmod -R u+rwX "$PR" && chmod 700 "$T"

# ---- corrupt the newest version: verify names it, restore falls back ----------
expect 0 "verify persist dir (all good)" -- "$FTC" verify "$P"
grep_in out "^v3: ok" "v3 ok before corruption"
V3=$(ls -d "$P"/v* | sort | tail -1)
f=$V3/shard-d1-t0-p0.ftcz
flip "$f" $(($(stat -c %s "$f") / 2))
expect 1 "verify persist dir after corrupting v3" -- "$FTC" verify "$P"
grep_in out "^v3: CORRUPT: .*shard-d1-t0-p0.ftcz" "verify names the corrupt version and file"
grep_in out "^v2: ok" "older versions still ok"
grep_in err "1 of 3 committed version\(s\) corrupt; first: v3" "verify summary on stderr"
expect 1 "verify the corrupt version dir" -- "$FTC" verify "$V3"
expect 0 "restore falls back" -- "$FTC" restore "$P" --out "$T/fallback.shard"
grep_in out "restored step 2" "restore restored the previous step"
grep_in out "skipped 1 newer" "restore counts the skipped version"
grep_in err "v0*3" "restore warns about the skipped version"
expect 0 "restored shard verifies" -- "$FTC" verify "$T/fallback.shard"
expect 1 "restore --step of the corrupt version fails" -- "$FTC" restore "$P" --step 3 --out "$T/x.shard"
expect 1 "restore --rank out of range" -- "$FTC" restore "$P" --rank 9 --out "$T/x.shard"

# a relative --job-dir is made absolute (the embedded redis-server runs in it)
expect 0 "ftc run with a relative --job-dir" -- bash -c \
    "cd '$T' && timeout 120 '$FTC' run --simulate-nodes 1 --job clirel\$\$ --job-dir reljob -- /bin/true"
expect 0 "its embedded Redis wrote its log in the job directory" -- test -s "$T/reljob/redis.log"

# every `ftc run` error names the command once: a usage error, and an error
# of the supervisor (it used to say "ftc run: node 0: ftc run: 1 failed ...")
once() { # once FILE DESCRIPTION: "ftc run:" exactly once on each of its lines that has it
    n=$((n + 1))
    if grep -q "ftc run:" "$T/$1" && ! grep -q "ftc run:.*ftc run:" "$T/$1"; then
        echo "ok: $2"
    else
        echo "FAIL: $2:"; sed 's/^/  /' "$T/$1" | head -20; fails=$((fails + 1))
    fi
}
expect 2 "ftc run --nnodes 3:1 is a usage error" -- "$FTC" run --nnodes 3:1 -- /bin/true
once err "its usage error says 'ftc run:' once"
expect 2 "ftc run without a binary is a usage error" -- "$FTC" run --job x
once err "its usage error says 'ftc run:' once"
expect 1 "ftc run of a failing binary with --max-restarts 0 fails" -- \
    timeout 120 "$FTC" run --simulate-nodes 1 --max-restarts 0 --job clionce$$ \
    --job-dir "$T/oncejob" -- /bin/false
grep_in err "ftc run: node 0: 1 failed generations" "it names the failed generations"
once err "the supervisor's error says 'ftc run:' once"

# a BINARY that cannot be executed is a usage error naming it and why, before anything starts:
# the node started the job's Redis, its ranks failed with status 127 and "cannot execute the
# training binary" (no name, no reason) --max-restarts + 1 times, and it exited 1
printf 'echo hi\n' >"$T/noexec.sh"
while IFS='|' read -r bin msg; do
    expect 2 "ftc run -- $bin is a usage error" -- timeout 60 "$FTC" run --simulate-nodes 1 \
        --job clibin$$ --job-dir "$T/binjob" -- "$bin"
    grep_in err "^ftc run: BINARY '$bin' $msg" "its error names the binary and why"
done <<EOF
$T/nosuch|does not exist
$T|is a directory
$T/noexec.sh|is not executable: chmod \+x it
nosuchprog$$|is not an executable on PATH: give its path
EOF
expect 1 "no node was started for it" -- grep -q "node 0 is pid" "$T/err"

# a millisecond or count flag too big for the supervisor's int (it wrapped:
# --grace-ms 3000000000 became a negative grace, read as no deadline at all,
# and --max-restarts 4294967296 became 0) is a usage error naming the flag
for f in "--grace-ms 3000000000" "--join-timeout-ms 3000000000" "--settle-ms 3000000000" \
    "--max-restarts 4294967296"; do
    expect 2 "ftc run $f is a usage error" -- \
        timeout 60 "$FTC" run --simulate-nodes 1 $f --job clibig$$ --job-dir "$T/bigjob" -- /bin/true
    grep_in err "ftc run: ${f% *} ${f#* } is too large" "its error names ${f% *} and its value"
done
expect 2 "a --rdzv-conf join_timeout over the limit is a usage error" -- \
    timeout 60 "$FTC" run --simulate-nodes 1 --rdzv-conf join_timeout=2592000 --job clibig$$ \
    --job-dir "$T/bigjob" -- /bin/true
grep_in err "--rdzv-conf join_timeout .* is too large" "its error names --rdzv-conf join_timeout"
# a node rank from the environment that is no number was read as node 0 (two
# nodes of a job could both be node 0): a usage error naming the variable
expect 2 "ftc run with NODE_RANK=one is a usage error" -- \
    env -u FTC_NODE_RANK NODE_RANK=one timeout 60 "$FTC" run --nnodes 2 --job clinr$$ \
    --job-dir "$T/nrjob" -- /bin/true
grep_in err "NODE_RANK='one' is not a node index" "its error names NODE_RANK and its value"
expect 2 "ftc run with SLURM_NNODES=two is a usage error" -- \
    env SLURM_NNODES=two timeout 60 "$FTC" run --job clinr$$ --job-dir "$T/nrjob" -- /bin/true
grep_in err "SLURM_NNODES='two' is not a node count" "its error names SLURM_NNODES, not --nnodes"
# a node rank at or above --nnodes MAX is named as it was given: from SLURM_NODEID the
# error spoke of --node-rank (not given) and of --nproc-per-node (not wrong)
expect 2 "ftc run with SLURM_NODEID=3 and --nnodes 2 is a usage error" -- \
    env -u FTC_NODE_RANK -u NODE_RANK SLURM_NODEID=3 timeout 60 "$FTC" run --nnodes 2 \
    --job clinr$$ --job-dir "$T/nrjob" -- /bin/true
grep_in err "^ftc run: SLURM_NODEID=3: this node's index must be below --nnodes MAX \(2\)" \
    "its error names SLURM_NODEID, its value and the bound"
expect 2 "ftc run --node-rank 3 --nnodes 2 is a usage error" -- \
    timeout 60 "$FTC" run --node-rank 3 --nnodes 2 --job clinr$$ --job-dir "$T/nrjob" -- /bin/true
grep_in err "^ftc run: --node-rank 3: must be below --nnodes MAX \(2\)$" \
    "its error names --node-rank and its value, not --nproc-per-node"
expect 2 "ftc agent with FTC_NODE_RANK=x1 is a usage error" -- \
    env FTC_NODE_RANK=x1 timeout 60 "$FTC" agent --nodes 2 --job clinr$$ --job-dir "$T/nrjob"
grep_in err "FTC_NODE_RANK='x1' is not a node index" "its error names FTC_NODE_RANK and its value"
# status and events name the flag that is out of range and its value (status named both)
while IFS='|' read -r args msg; do
    read -ra sargv <<<"$args"
    expect 2 "ftc $args is a usage error" -- \
        timeout 60 "$FTC" "${sargv[@]}" --redis redis://127.0.0.1:1
    grep_in err "^ftc ${sargv[0]}: $msg" "its error names ${sargv[1]} and its value"
done <<'EOF'
status --interval 10|--interval 10: must be 50\.\.3600000 ms$
status --events 1001|--events 1001: must be at most 1000$
events --count 0|--count 0: must be 1\.\.100000$
EOF
# a redis.url that is no URL is a bad setting, a usage error naming where it came from (exit 2,
# as every other bad setting), not exit 1 as an unreachable Redis; nothing is started
while IFS='|' read -r envs args msg; do
    read -ra uargv <<<"$args"
    expect 2 "$envs ftc $args is a usage error" -- env $envs timeout 60 "$FTC" "${uargv[0]}" \
        --job cliurl$$ --job-dir "$T/urljob" "${uargv[@]:1}"
    grep_in err "^ftc ${uargv[0]}: redis\.url \(from $msg\): redis URL" \
        "its error names the redis.url setting and $msg"
done <<'EOF'
|status --redis notaurl|--redis
|events --redis redis://127.0.0.1:99999|--redis
|clean --redis notaurl|--redis
FTC_REDIS_URL=notaurl|agent --nodes 1|FTC_REDIS_URL
|run --redis notaurl -- /bin/true|--redis
EOF
# a job id that names no file, shm slot or Redis key is a usage error naming the setting and
# where it came from, before anything starts: ftc run --job a/b failed with exit 1 naming the
# job directory, --job '' in the node after the job's Redis had started
while IFS='|' read -r envs args msg; do
    read -ra jargv <<<"$args"
    expect 2 "$envs ftc $args is a usage error" -- env $envs timeout 60 "$FTC" "${jargv[@]}"
    grep_in err "^ftc ${jargv[0]}: $msg" "its error names job.id, the value and the source"
done <<'EOF'
|run --job a/b --simulate-nodes 1 -- /bin/true|config job\.id \(from --job-id\): 'a/b' is not a job id
|run --job= --simulate-nodes 1 -- /bin/true|config job\.id \(from --job-id\): '' is not a job id
FTC_JOB_ID=a:b|status --redis redis://127.0.0.1:1|environment: config job\.id \(from FTC_JOB_ID\)
EOF

# a server on --redis's port that is no Redis (here one that answers as HTTP): the error said
# only 'Protocol error, got "H" as reply type byte'; now it says what to check
"$PY" -c '
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept(); c.recv(256); c.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n"); c.close()
' >"$T/http.port" &
HPID=$!
for _ in $(seq 100); do [ -s "$T/http.port" ] && break; sleep 0.05; done
HP=$(cat "$T/http.port")
expect 1 "ftc status against an HTTP server" -- timeout 60 "$FTC" status --redis "redis://127.0.0.1:$HP"
grep_in err "^ftc status: redis 127.0.0.1:$HP: PING: Protocol error.*does not speak Redis's \
protocol: check the host and port of --redis" "its error says it is no Redis and what to check"
kill "$HPID" 2>/dev/null
wait "$HPID" 2>/dev/null

# ftc agent's layout errors name the flag (or variable) that is wrong and its value: one
# message listed --nodes, --index and --ranks-per-node whichever it was
while IFS='|' read -r envs args msg; do
    read -ra aargv <<<"$args"
    expect 2 "$envs ftc agent $args is a usage error" -- env -u FTC_NODE_RANK -u NODE_RANK $envs \
        timeout 60 "$FTC" agent "${aargv[@]}" --job cliag$$ --job-dir "$T/agjob"
    grep_in err "^ftc agent: $msg" "its error names ${msg%%[ =]*} and its value"
done <<'EOF'
|--index 0|--nodes N \(the agents in the job, 1\.\.4096\) is required$
|--nodes 5000|--nodes 5000: must be 1\.\.4096
|--nodes 2 --index 2|--index 2: must be below --nodes 2$
NODE_RANK=3|--nodes 2|NODE_RANK=3: this node's index must be below --nodes 2
|--nodes 1 --ranks-per-node 65|--ranks-per-node 65: must be 1\.\.64$
EOF
# a --domain the agent refuses failed ftc run in the node (exit 1), after the job's Redis had
# started; it is a usage error of ftc run and ftc agent, naming the value
expect 2 "ftc run --domain 'a b' is a usage error" -- timeout 60 "$FTC" run --simulate-nodes 1 \
    --domain "a b" --job clidom$$ --job-dir "$T/domjob" -- /bin/true
grep_in err "^ftc run: --domain 'a b': give 1\.\.63 printable characters without spaces" \
    "its error names --domain and its value"
expect 2 "ftc agent --domain - is a usage error" -- timeout 60 "$FTC" agent --nodes 1 \
    --domain - --redis redis://127.0.0.1:1 --job clidom$$ --job-dir "$T/domjob"
grep_in err "^ftc agent: --domain '-': give 1\.\.63" "its error names --domain and its value"
# a --node-id with a space (or over 64 bytes) was taken: the agent's Redis join refused it and
# the agent waited 30 s for a generation, then failed naming that instead
expect 2 "ftc agent --node-id 'a b' is a usage error" -- timeout 60 "$FTC" agent --nodes 1 \
    --node-id "a b" --redis redis://127.0.0.1:1 --job clinid$$ --job-dir "$T/nidjob"
grep_in err "^ftc agent: --node-id 'a b': give 1\.\.64 characters" \
    "its error names --node-id and its value"
expect 2 "ftc run --node-id 'a b' is a usage error" -- timeout 60 "$FTC" run --simulate-nodes 1 \
    --node-id "a b" --job clinid$$ --job-dir "$T/nidjob" -- /bin/true
grep_in err "^ftc run: --node-id 'a b': give 1\.\.64 characters" \
    "its error names --node-id and its value"

# ftc agent's --persist-every took any number (its own option, not the setting's flag):
# 0, or 4294967296 cast to 0, left the persist tier never written, without a word
for v in 0 4294967296; do
    expect 2 "ftc agent --persist-every $v is a usage error" -- timeout 60 "$FTC" agent --nodes 1 \
        --persist-every "$v" --redis redis://127.0.0.1:1 --job clipe$$ --job-dir "$T/pejob"
    grep_in err "persist.every \(from --persist-every\): $v is out of range \[1, 1000000\]" \
        "its error names --persist-every, the value and the range"
done

# an ftc train flag out of range names itself, its value and its range: one message listed
# every range (and no --seq-len at all), the guard's named no flag and showed --guard-window
# 300 as 257, and too many micro-batches read as "must be a multiple of --micro-batch"
while IFS='|' read -r args msg; do
    read -ra targv <<<"$args"
    expect 2 "ftc train $args is a usage error" -- timeout 60 "$FTC" train "${targv[@]}"
    grep_in err "^ftc train: $msg" "its error names ${targv[0]} and its value"
done <<'EOF'
--seq-len 100000|--seq-len 100000: must be 1\.\.65536$
--micro-batch 0|--micro-batch 0: must be 1\.\.4096$
--steps 0|--steps 0: must be 1\.\.2147483646$
--log-every 0|--log-every 0: must be at least 1$
--eval-batches 100001|--eval-batches 100001: must be 1\.\.100000$
--guard-window 300|--guard-window 300: must be 2\.\.256$
--guard-spike-sigma -1|--guard-spike-sigma -1: must be >= 0
--global-batch 589832 --micro-batch 8|--global-batch 589832 is more than 65536 micro-batches
EOF

# the URL file of a job whose embedded Redis died with it (kill -9 of ftc
# run): the next run starts a new one instead of failing on the dead address
mkdir -p "$T/stalejob" && echo "redis://127.0.0.1:1/0" >"$T/stalejob/redis.url"
expect 0 "ftc run after a killed run left a dead Redis's URL" -- \
    timeout 120 "$FTC" run --simulate-nodes 1 --job clistale$$ --job-dir "$T/stalejob" -- /bin/true
grep_in err "names a Redis at 127.0.0.1:1 that is not running" "it said it started a new one"

# a really full disk (a 3 MiB tmpfs, mounted in a mount namespace of its own:
# root only, else skipped): the version that does not fit fails naming the
# full disk and what to do, leaves no partial version, and the versions
# committed before it verify and restore
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
    mkdir -p "$T/full"
    expect 1 "synth onto a full disk fails" -- unshare -m bash -c \
        "mount -t tmpfs -o size=3m tmpfs '$T/full' && '$FTC' synth --out '$T/full/p' --steps 8 \
         --bytes 1MiB --persist-keep 8 --persist-full-every 1 && echo never-full; \
         r=\$?; ls '$T/full/p' | sed 's/^/dir /'; '$FTC' verify '$T/full/p' >&2 && \
         '$FTC' restore '$T/full/p' --out '$T/full.shard' >&2 && exit \$r"
    grep_in err "the disk is full: version v0*([3-9]) not written .*persist.keep" \
        "the error says the disk is full and what to do"
    grep_in err "No space left on device" "and names the failed write"
    grep_in out "^dir v0*1\$" "the first version is there"
    n=$((n + 1))
    nv=$(grep -c "^dir " "$T/out")
    if grep -q "never-full" "$T/out" || [ "$nv" -lt 2 ] || [ "$nv" -ge 8 ]; then
        echo "FAIL: the disk never filled, or fewer than 2 versions fit ($nv)"; fails=$((fails + 1))
    else
        echo "ok: $nv versions committed before the disk filled, no partial one"
    fi
    grep_in err ": $nv committed version\(s\) verified" "those verify, and every directory is one of them"
    grep_in err "restored step [0-9]+" "and the newest of them restores"
else
    echo "skip: full disk (needs root and unshare -m)"
fi

echo "$((n - fails)) of $n checks passed"
[ "$fails" -eq 0 ]
