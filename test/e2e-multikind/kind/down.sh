#!/usr/bin/env bash
# down.sh deletes the kind clusters up.sh created: flotilla-hub and every
# flotilla-member-N (whatever MEMBERS was). The artifacts (kubeconfigs,
# the join values, logs) stay; PURGE=1 removes them as well.
#
#   test/e2e-multikind/kind/down.sh
#   PURGE=1 test/e2e-multikind/kind/down.sh
set -Eeuo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

need docker "Install Docker: https://docs.docker.com/get-docker/"
need "$KIND" "Install kind, or run make kind-bin"

clusters=()
while IFS= read -r name; do
	if [[ $name == "$HUB_CLUSTER" || $name =~ ^${MEMBER_CLUSTER_PREFIX}[0-9]+$ ]]; then
		clusters+=("$name")
	fi
done < <("$KIND" get clusters 2>/dev/null)

if ((${#clusters[@]} == 0)); then
	log "no Flotilla kind clusters to delete"
else
	for name in "${clusters[@]}"; do
		log "deleting kind cluster $name"
		"$KIND" delete cluster --name "$name"
	done
fi

# The nodes' network, when up.sh made it (its label) and no container is
# left on it.
if [[ $(docker network inspect -f '{{index .Labels "dev.flotilla.kind-network"}}' "$KIND_NETWORK" 2>/dev/null) == 1 ]]; then
	if [[ -z $(docker network inspect -f '{{range .Containers}}{{.Name}} {{end}}' "$KIND_NETWORK") ]]; then
		log "removing docker network $KIND_NETWORK"
		docker network rm "$KIND_NETWORK" >/dev/null
	else
		log "docker network $KIND_NETWORK still has containers; left as it is"
	fi
fi

if [[ ${PURGE:-0} == 1 ]]; then
	log "removing $ARTIFACTS"
	rm -rf -- "$ARTIFACTS"
fi
