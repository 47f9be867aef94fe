#!/usr/bin/env bash
# make e2e-kind: the e2e suite on kind, offline. It prepares Docker
# (docker-setup.sh), brings up a hub and MEMBERS member clusters from the
# node image make kind-image built (test/e2e-multikind/kind/up.sh: Flotilla
# installed by its Helm charts and a join token), measures the clusters at
# rest, runs the e2e suite with -provider=kind, and deletes every cluster it
# created, whether the suite passed or not. Timings and memory go to
# $ARTIFACTS/report.txt and are printed at the end.
#
# Settings (environment): those of test/e2e-multikind/kind/common.sh, and
#   E2E_RUN        -run pattern for the suite (default: every spec)
#   E2E_TIMEOUT    go test -timeout (default 60m)
#   E2E_PARALLEL   go test -parallel: how many independent specs run at
#                  once (default 4: four clusters on 2 cores reached a load
#                  average of 37 with 8; 1: one after another)
#   E2E_DEADLINE   a time (seconds since the epoch) by which the suite must
#                  end: its -timeout is what is left then (at least 60 s);
#                  overrides E2E_TIMEOUT (CI's time budget, .ci/run)
#   KEEP_CLUSTERS  1: leave the clusters up afterwards (down.sh removes them)
set -Eeuo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
kind_dir=$root/test/e2e-multikind/kind
# shellcheck source-path=SCRIPTDIR source=../../test/e2e-multikind/kind/common.sh
source "$kind_dir/common.sh"

mkdir -p "$ARTIFACTS"
report=$ARTIFACTS/report.txt
: >"$report"
note() { printf '%s\n' "$*" | tee -a "$report" >&2; }

"$root/hack/kind/docker-setup.sh"
[[ -n $KIND_NODE_IMAGE ]] || die "no node image: run make kind-image (it writes bin/kind-node-image)"
docker image inspect "$KIND_NODE_IMAGE" >/dev/null 2>&1 || die "node image $KIND_NODE_IMAGE is not in Docker: run make kind-image"

# Clusters left by an earlier run would be reused by up.sh; a test run
# starts from none.
"$kind_dir/down.sh"

teardown() {
	local rc=$?
	if [[ ${KEEP_CLUSTERS:-0} == 1 ]]; then
		log "KEEP_CLUSTERS=1: the clusters stay up; $kind_dir/down.sh deletes them"
	else
		"$kind_dir/down.sh" || rc=1
		# Nothing of this run may stay behind: no node container, no volume.
		local left
		left=$(docker ps -a --filter label=io.x-k8s.kind.cluster --format '{{.Names}}' | grep -E "^($HUB_CLUSTER|$MEMBER_CLUSTER_PREFIX[0-9]+)-" || true)
		if [[ -n $left ]]; then
			log "error: containers left after down.sh: $left"
			rc=1
		fi
	fi
	[[ -s $report ]] && {
		echo "--- e2e-kind report ($report)" >&2
		cat "$report" >&2
	}
	exit "$rc"
}
trap teardown EXIT

note "node image: $KIND_NODE_IMAGE ($(docker image inspect -f '{{.Size}}' "$KIND_NODE_IMAGE" | awk '{printf "%d MiB", $1/1048576}'))"
start=$SECONDS
"$kind_dir/up.sh" 2>&1 | tee "$ARTIFACTS/up.log" | grep -E '^==>|created in|error' >&2
note "up.sh (4 clusters, images, charts, join): $((SECONDS - start)) s"
grep -o 'kind cluster [^ ]* created in [0-9]* s' "$ARTIFACTS/up.log" | sed 's/^/  /' | tee -a "$report" >&2 || true

# At rest: a minute after the members are Ready, what each node container
# (its kubelet, containerd, control plane and Flotilla) holds.
sleep 60
note "memory at rest (docker stats):"
docker stats --no-stream --format '{{.Name}} {{.MemUsage}}' |
	grep -E "^($HUB_CLUSTER|$MEMBER_CLUSTER_PREFIX[0-9]+)-control-plane " | sed 's/^/  /' | tee -a "$report" >&2
total=$(docker stats --no-stream --format '{{.Name}} {{.MemUsage}}' |
	grep -E "^($HUB_CLUSTER|$MEMBER_CLUSTER_PREFIX[0-9]+)-control-plane " |
	awk '{v=$2; u=v; sub(/[0-9.]+/,"",u); sub(/[A-Za-z]+$/,"",v); f=(u=="GiB")?1024:(u=="MiB")?1:(u=="KiB")?1/1024:1/1048576; s+=v*f} END {printf "%.0f", s}')
note "  total: $total MiB"

timeout=${E2E_TIMEOUT:-60m}
if [[ -n ${E2E_DEADLINE:-} ]]; then
	left=$((E2E_DEADLINE - $(date +%s)))
	((left >= 60)) || left=60
	timeout=${left}s
	note "suite timeout: $timeout (E2E_DEADLINE)"
fi
start=$SECONDS
rc=0
(cd "$root" && go test -tags e2e -count=1 -timeout "$timeout" -parallel "${E2E_PARALLEL:-4}" ./test/e2e-multikind/ -v \
	${E2E_RUN:+-run "$E2E_RUN"} -args $(cat "$ARTIFACTS/e2e-flags")) 2>&1 | tee "$ARTIFACTS/e2e.log" |
	grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)' >&2 || rc=$?
grep -qE '^(--- FAIL|FAIL)' "$ARTIFACTS/e2e.log" && rc=1
grep -qE '^ok ' "$ARTIFACTS/e2e.log" || rc=1
note "e2e suite on kind: $((SECONDS - start)) s, $(grep -c '^--- PASS' "$ARTIFACTS/e2e.log") passed, $(grep -c '^--- FAIL' "$ARTIFACTS/e2e.log") failed, $(grep -c '^--- SKIP' "$ARTIFACTS/e2e.log") skipped"
grep -E '^--- (FAIL|SKIP)' "$ARTIFACTS/e2e.log" | sed 's/^/  /' | tee -a "$report" >&2 || true
# What each failed spec logged last (its failure among it), into the
# report, which is printed last: a CI that keeps only the end of a run's
# output still shows why (three specs at most, eight lines each).
awk '
	/^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
	/^ *--- (PASS|FAIL|SKIP): / { name = $3; if ($2 == "FAIL:" && !(name in failed)) { failed[name] = 1; order[++n] = name } ; cur = ""; next }
	cur != "" && /^    / { k = cnt[cur]++ % 8; last[cur, k] = substr($0, 1, 300) }
	END {
		for (i = 1; i <= n && i <= 3; i++) {
			t = order[i]; c = cnt[t]
			if (c == 0) continue
			print "  last lines of " t ":"
			for (j = (c > 8 ? c - 8 : 0); j < c; j++) print "  " last[t, j % 8]
		}
	}' "$ARTIFACTS/e2e.log" | tee -a "$report" >&2 || true
exit "$rc"
