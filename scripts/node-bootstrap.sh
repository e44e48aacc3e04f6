#!/bin/bash
# burstd node bootstrap: the start-up script of every burstd cloud node (AWS user data, GCE startup-script).
#
# 1. find this node's Slurm name (AWS: instance tag burstd:node via IMDSv2, waited for since a gang member gets
#    it after boot starts; GCE: metadata attribute burstd-node, or for a gang member its own instance name's
#    entry in the attribute burstd-members)
# 2. fetch the munge key from the cloud's secret store with the instance's own role
#    (AWS Secrets Manager, or SSM SecureString when BURSTD_MUNGE_SECRET starts with "ssm:"; GCP Secret Manager)
# 3. install it as /etc/munge/munge.key, 0400 munge:munge, and (re)start munge
# 4. close the metadata endpoint (169.254.169.254) to every user but root (nftables owner match, or iptables):
#    the node's role can read the munge key's secret and the metadata service hands that role's credentials to
#    any local caller, so no job may reach it; root (this script, burstd-agent) still can
# 5. the agent's token (burstd-agent --enroll): the node proves which instance it is with its signed identity from
#    the metadata service (root's alone now) and keeps the token burstd answers; burstd accepts a proof only
#    until the node's slurmd registers
# 6. the parity gate (burstd-agent --parity-gate): a node unlike the on-prem reference stops here, reported
# 7. start slurmd configless (--conf-server) under the node name, then burstd-agent (no job runs before this)
#
# Idempotent: running it again converges on the same state. Logs to the journal (tag burstd-bootstrap) and to
# stderr; any failure stops the script with a message naming the step. The key never reaches a log, an argument
# list, or any file but munge.key. The header above the marker line sets (burstd renders it):
#   BURSTD_CLOUD=aws|gcp  BURSTD_MUNGE_SECRET=...  BURSTD_CONF_SERVER=host[:port]  BURSTD_REGION / BURSTD_PROJECT
set -euo pipefail
set +x  # never trace: a trace could print the key

: "${BURSTD_CLOUD:?BURSTD_CLOUD is not set (aws or gcp)}"
: "${BURSTD_MUNGE_SECRET:?BURSTD_MUNGE_SECRET is not set}"
: "${BURSTD_CONF_SERVER:?BURSTD_CONF_SERVER is not set (slurmctld host[:port])}"
BURSTD_ROOT="${BURSTD_ROOT:-}"                      # tests: install under this prefix
AWS_IMDS="${BURSTD_IMDS_URL:-http://169.254.169.254}"
GCE_MD="${BURSTD_GCE_METADATA_URL:-http://metadata.google.internal}"
SECRETS_API="${BURSTD_SECRETMANAGER_URL:-https://secretmanager.googleapis.com}"
MUNGE_KEY="${BURSTD_ROOT}/etc/munge/munge.key"
STATE_DIR="${BURSTD_ROOT}/var/lib/burstd-node"
NAME_WAIT_S="${BURSTD_NODE_NAME_WAIT_S:-300}"     # AWS: how long to wait for the burstd:node tag
NAME_POLL_S="${BURSTD_NODE_NAME_POLL_S:-5}"
METADATA_ADDR="169.254.169.254"                   # AWS IMDS and GCE metadata.google.internal alike

log() {
    echo "burstd-bootstrap: $*" >&2
    if command -v logger >/dev/null 2>&1; then logger -t burstd-bootstrap -- "$*" || true; fi
}
die() { log "FAILED: $*"; exit 1; }
trap 'die "line $LINENO: command exited with status $?"' ERR

imds_token() {
    curl -sf --retry 5 --retry-connrefused -X PUT "$AWS_IMDS/latest/api/token" \
        -H "X-aws-ec2-metadata-token-ttl-seconds: 300"
}
imds_get() {  # path
    curl -sf --retry 5 --retry-connrefused -H "X-aws-ec2-metadata-token: $(imds_token)" "$AWS_IMDS/latest/$1"
}
gce_get() {  # path under computeMetadata/v1
    curl -sf --retry 5 --retry-connrefused -H "Metadata-Flavor: Google" "$GCE_MD/computeMetadata/v1/$1"
}

# AWS: the instance tag burstd:node. A gang member (one fleet for a multi-node job) is tagged with its node only
# after the fleet answers, a moment after boot has begun: wait for the tag, up to BURSTD_NODE_NAME_WAIT_S.
aws_node_name() {
    # SECONDS counts whole seconds, so a short bound can run out within one slow look: always ask twice.
    local name asked=0 deadline=$((SECONDS + NAME_WAIT_S))
    while true; do
        if name="$(imds_get "meta-data/tags/instance/burstd:node")" && [[ -n "$name" ]]; then
            echo "$name"
            return 0
        fi
        asked=$((asked + 1))
        if ((asked >= 2 && SECONDS >= deadline)); then
            log "instance tag burstd:node did not appear within ${NAME_WAIT_S}s (are instance tags in metadata on?)"
            return 1
        fi
        log "instance tag burstd:node not there yet (gang members are tagged after launch); asking again in ${NAME_POLL_S}s"
        sleep "$NAME_POLL_S"
    done
}

# GCE: the metadata attribute burstd-node; a gang member (one bulkInsert, the same metadata for all) instead
# looks its own instance name up in the attribute burstd-members ({"<instance>": {"node": ..., "lease": ...}}).
gce_node_name() {
    local self members
    if gce_get "instance/attributes/burstd-node"; then return 0; fi
    members="$(gce_get "instance/attributes/burstd-members")" || {
        log "neither burstd-node nor burstd-members is in this instance's metadata"
        return 1
    }
    self="$(gce_get "instance/name")" || return 1
    python3 -c '
import json, sys
entry = json.load(sys.stdin).get(sys.argv[1])
if not isinstance(entry, dict) or not entry.get("node"):
    sys.exit("burstd-bootstrap: instance %s is not in burstd-members" % sys.argv[1])
print(entry["node"])' "$self" <<<"$members"
}

node_name() {
    case "$BURSTD_CLOUD" in
        aws) aws_node_name ;;
        gcp) gce_node_name ;;
        *) die "unknown BURSTD_CLOUD '$BURSTD_CLOUD'" ;;
    esac
}

# Writes the key (raw bytes) to stdout; callers redirect it straight into a 0600 temp file.
fetch_key() {
    case "$BURSTD_CLOUD" in
        aws)
            local region
            region="${BURSTD_REGION:-$(imds_get meta-data/placement/region)}"
            if [[ "$BURSTD_MUNGE_SECRET" == ssm:* ]]; then
                aws ssm get-parameter --region "$region" --with-decryption --name "${BURSTD_MUNGE_SECRET#ssm:}" \
                    --query Parameter.Value --output text | base64 -d
            else
                aws secretsmanager get-secret-value --region "$region" --secret-id "$BURSTD_MUNGE_SECRET" \
                    --query SecretString --output text | base64 -d
            fi
            ;;
        gcp)
            local project token_json
            project="${BURSTD_PROJECT:-$(gce_get project/project-id)}"
            token_json="$(gce_get instance/service-accounts/default/token)"
            # The bearer token goes to curl through a header file on stdin, never in argv.
            python3 -c 'import json,sys; print("Authorization: Bearer " + json.load(sys.stdin)["access_token"])' \
                <<<"$token_json" |
                curl -sf --retry 5 -H @- \
                    "$SECRETS_API/v1/projects/$project/secrets/$BURSTD_MUNGE_SECRET/versions/latest:access" |
                python3 -c 'import base64,json,sys; sys.stdout.buffer.write(base64.b64decode(base64.b64decode(json.load(sys.stdin)["payload"]["data"])))'
            ;;
    esac
}

install_key() {
    local dir tmp
    dir="$(dirname "$MUNGE_KEY")"
    install -d -m 0700 "$dir"
    tmp="$(mktemp "$dir/.munge.key.XXXXXX")"
    fetch_key >"$tmp" || { rm -f "$tmp"; die "could not fetch the munge key from $BURSTD_CLOUD secret '$BURSTD_MUNGE_SECRET'"; }
    [[ -s "$tmp" ]] || { rm -f "$tmp"; die "the munge key secret '$BURSTD_MUNGE_SECRET' is empty"; }
    chmod 0400 "$tmp"
    if [[ -z "$BURSTD_ROOT" ]]; then chown munge:munge "$tmp" "$dir"; fi
    mv -f "$tmp" "$MUNGE_KEY"
    log "munge key installed at $MUNGE_KEY (0400 munge:munge)"
}

lock_metadata() {
    # the same rule the local provider applies inside its namespace VMs (burstd.providers.local.metadata)
    if command -v nft >/dev/null 2>&1; then
        nft delete table inet burstd_metadata >/dev/null 2>&1 || true
        nft -f - <<NFT || die "nft refused the rule closing $METADATA_ADDR to non-root users"
table inet burstd_metadata {
    chain output {
        type filter hook output priority 0; policy accept;
        ip daddr $METADATA_ADDR meta skuid != 0 counter reject with tcp reset
    }
}
NFT
    elif command -v iptables >/dev/null 2>&1; then
        iptables -C OUTPUT -d "$METADATA_ADDR" -p tcp -m owner ! --uid-owner 0 -j REJECT --reject-with tcp-reset \
            2>/dev/null \
            || iptables -I OUTPUT -d "$METADATA_ADDR" -p tcp -m owner ! --uid-owner 0 -j REJECT --reject-with tcp-reset \
            || die "iptables refused the rule closing $METADATA_ADDR to non-root users"
    else
        die "neither nft nor iptables is on this image: cannot close $METADATA_ADDR to non-root users"
    fi
    log "metadata endpoint $METADATA_ADDR closed to every user but root"
}

# burstd-agent before slurmd: `agent_step NODE FLAG` runs it and prints its exit status (0 on success); no agent,
# or no agent config, on this image: "none" (the step is skipped, logged by the caller).
agent_step() {  # node flag
    local conf="${BURSTD_ROOT}/etc/burstd/burstd.toml" rc=0
    if ! command -v burstd-agent >/dev/null 2>&1 || [[ ! -f "$conf" ]]; then
        echo none
        return 0
    fi
    burstd-agent --config "$conf" --node "$1" "$2" >&2 || rc=$?
    echo "$rc"
}

# The agent's token: the node proves its identity to burstd and keeps the token burstd answers (the gate below and
# the agent speak with it). Refused or not reached: slurmd is never started and the lease fails at its boot timeout.
enroll_agent() {  # node
    local rc
    rc="$(agent_step "$1" --enroll)"
    case "$rc" in
        none) log "no burstd-agent or no agent config on this image: no agent token" ;;
        0) log "agent token for node $1 in place" ;;
        1) die "burstd refused node $1's instance identity; slurmd not started" ;;
        *) die "could not enrol node $1 with burstd (burstd-agent exit $rc); slurmd not started" ;;
    esac
}

# The parity gate: burstd-agent compares this node with the on-prem reference the daemon keeps. On a difference it
# reports it (the lease fails with the difference as its reason) and slurmd is never started. No agent, or no agent
# config, on this image: no gate (logged).
parity_gate() {  # node
    local rc
    rc="$(agent_step "$1" --parity-gate)"
    case "$rc" in
        none) log "no burstd-agent or no agent config on this image: no parity gate" ;;
        0) log "parity gate: node $1 may take jobs" ;;
        1) die "parity gate: node $1 differs from the on-prem reference (reported to burstd); slurmd not started" ;;
        *) die "parity gate: could not check node $1 (burstd-agent exit $rc); slurmd not started" ;;
    esac
}

main() {
    local node
    node="$(node_name)" || die "could not read the node name from the $BURSTD_CLOUD metadata"
    [[ "$node" =~ ^[a-z][a-z0-9-]{0,62}$ ]] || die "node name '$node' from metadata is not a valid Slurm node name"
    log "bootstrapping Slurm node $node (cloud $BURSTD_CLOUD, conf server $BURSTD_CONF_SERVER)"
    install -d -m 0755 "$STATE_DIR"
    echo "$node" >"$STATE_DIR/node-name"

    install_key
    systemctl restart munge || die "munge did not start"
    lock_metadata  # before slurmd: no job may ever see it open
    enroll_agent "$node"  # after the lock: from here only root can read the identity it proves
    parity_gate "$node"  # before slurmd: a node unlike the on-prem ones never takes a job

    # slurmd configless under the node's Slurm name; a drop-in makes it survive reboots and stay idempotent.
    install -d -m 0755 "${BURSTD_ROOT}/etc/systemd/system/slurmd.service.d"
    cat >"${BURSTD_ROOT}/etc/systemd/system/slurmd.service.d/burstd.conf" <<UNIT
[Service]
ExecStart=
ExecStart=/usr/sbin/slurmd -D --conf-server ${BURSTD_CONF_SERVER} -N ${node}
UNIT
    systemctl daemon-reload
    systemctl enable --now slurmd || die "slurmd did not start"
    systemctl restart slurmd || die "slurmd did not restart"

    if systemctl cat burstd-agent.service >/dev/null 2>&1; then
        systemctl enable --now burstd-agent || die "burstd-agent did not start"
    else
        log "burstd-agent.service is not installed on this image: preemption notices will only be seen server-side"
    fi
    log "node $node bootstrapped"
}

main "$@"
