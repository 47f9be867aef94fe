#!/usr/bin/env bash
# Makes this machine's Docker engine able to run kind nodes, and says what
# it changed. make e2e-kind runs it first.
#
#   hack/kind/docker-setup.sh          check, and fix what can be fixed
#   hack/kind/docker-setup.sh check    check only; exit 1 when kind cannot run
#   hack/kind/docker-setup.sh remove   undo the runtime registration below
#
# 1. Privileged containers. kind runs every node with --privileged, for
#    which Docker asks runc for every capability it knows. Some sandboxed
#    hosts (this project's CI machines among them) withhold a capability
#    (CAP_SYS_RESOURCE) even from root, and then no privileged container
#    starts ("unable to apply caps: operation not permitted"). When that
#    happens, and only then, this script installs runc-capfilter (built
#    from hack/kind/runc-capfilter) as /usr/local/libexec/flotilla/runc-capfilter,
#    registers it in /etc/docker/daemon.json as the runtime
#    flotilla-capfilter and makes it Docker's default (the old file is kept
#    as daemon.json.flotilla-backup), and reloads dockerd with SIGHUP (no
#    restart: running containers are untouched). The filter drops from each
#    container's spec only the capabilities the host lacks, which no
#    container could hold anyway, and runs runc.
# 2. inotify limits. Every kind node runs a kubelet, containerd and
#    systemd, each watching files; four nodes exceed the common default of
#    128 inotify instances per user. Raised to 512 instances and 524288
#    watches when lower (root only).
set -Eeuo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$root/bin}
mode=${1:-fix}
runtime=flotilla-capfilter
filter=/usr/local/libexec/flotilla/runc-capfilter
daemon_json=/etc/docker/daemon.json
probe_image=flotilla.dev/kind-probe:1

log() { printf '%s docker-setup: %s\n' "$(date +%T)" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

command -v docker >/dev/null || die "docker is not installed"
docker info >/dev/null 2>&1 || die "the Docker daemon is not reachable"

# reload_dockerd sends dockerd SIGHUP, which rereads runtimes and the
# default runtime, and waits until it answers with the wanted default.
reload_dockerd() {
	local want=$1 pid
	pid=$(pidof dockerd || true)
	[[ -n $pid ]] || die "no dockerd process to reload (is Docker remote? change its daemon.json there)"
	kill -HUP "$pid"
	for _ in $(seq 1 50); do
		[[ $(docker info -f '{{.DefaultRuntime}}' 2>/dev/null) == "$want" ]] && return 0
		sleep 0.2
	done
	die "dockerd did not take default runtime $want after SIGHUP"
}

if [[ $mode == remove ]]; then
	if [[ -f $daemon_json.flotilla-backup ]]; then
		# dockerd keeps its current default runtime on reload when the file
		# names none, so the restored file names Docker's own (runc).
		python3 - "$daemon_json.flotilla-backup" <<'EOF'
import json, sys
path = sys.argv[1]
with open(path) as f:
    d = json.load(f)
d.setdefault("default-runtime", "runc")
with open(path, "w") as f:
    json.dump(d, f, indent=2)
EOF
		mv "$daemon_json.flotilla-backup" "$daemon_json"
		reload_dockerd "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["default-runtime"])' "$daemon_json")"
		log "restored $daemon_json; Docker's default runtime is runc's again"
	else
		log "nothing to remove: $daemon_json.flotilla-backup does not exist"
	fi
	exit 0
fi

# The probe: a tiny image of Flotilla's pause binary, run privileged.
if ! docker image inspect "$probe_image" >/dev/null 2>&1; then
	[[ -x $bin/pause ]] || (cd "$root" && CGO_ENABLED=0 go build -o "$bin/pause" ./hack/kind/pause)
	tmp=$(mktemp -d)
	install -D -m 0755 "$bin/pause" "$tmp/pause"
	tar -C "$tmp" -c . | docker import --change 'ENTRYPOINT ["/pause"]' - "$probe_image" >/dev/null
	rm -rf "$tmp"
fi
privileged_ok() { docker run --rm --privileged "$probe_image" -v >/dev/null 2>"${1:-/dev/null}"; }

err=$(mktemp)
trap 'rm -f "$err"' EXIT
if privileged_ok "$err"; then
	log "privileged containers start"
else
	grep -q "unable to apply caps" "$err" ||
		die "a privileged container does not start, and not for want of a capability: $(cat "$err")"
	[[ $mode == check ]] && die "privileged containers fail on this host (a capability is withheld); run hack/kind/docker-setup.sh as root to register the capability filter"
	[[ $(id -u) == 0 ]] || die "privileged containers fail on this host (a capability is withheld); run this script as root to register the capability filter"
	command -v python3 >/dev/null || die "needs python3 to edit $daemon_json"
	log "privileged containers fail on this host: $(grep -o 'unable to apply caps[^:]*' "$err")"
	(cd "$root" && CGO_ENABLED=0 go build -o "$bin/runc-capfilter" ./hack/kind/runc-capfilter)
	install -D -m 0755 "$bin/runc-capfilter" "$filter"
	mkdir -p "$(dirname "$daemon_json")"
	[[ -f $daemon_json ]] || echo '{}' >"$daemon_json"
	[[ -f $daemon_json.flotilla-backup ]] || cp "$daemon_json" "$daemon_json.flotilla-backup"
	python3 - "$daemon_json" "$runtime" "$filter" <<'EOF'
import json, sys
path, name, filt = sys.argv[1:]
with open(path) as f:
    d = json.load(f)
d.setdefault("runtimes", {})[name] = {"path": filt}
d["default-runtime"] = name
with open(path + ".tmp", "w") as f:
    json.dump(d, f, indent=2)
import os
os.replace(path + ".tmp", path)
EOF
	reload_dockerd "$runtime"
	privileged_ok "$err" || die "privileged containers still fail with the filter: $(cat "$err")"
	log "registered $filter as Docker's default runtime $runtime (undo: hack/kind/docker-setup.sh remove)"
fi

# inotify limits for several nodes.
for pair in fs.inotify.max_user_instances=512 fs.inotify.max_user_watches=524288; do
	key=${pair%%=*} want=${pair#*=}
	have=$(sysctl -n "$key")
	if ((have < want)); then
		if [[ $mode == fix && $(id -u) == 0 ]]; then
			sysctl -qw "$key=$want"
			log "raised $key from $have to $want"
		else
			log "warning: $key is $have; kind with four clusters wants $want (sysctl -w $key=$want)"
		fi
	fi
done
