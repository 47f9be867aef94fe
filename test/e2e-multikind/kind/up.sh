#!/usr/bin/env bash
# up.sh brings up Flotilla on kind the way the README tells users to run it
# on their clusters: a hub cluster (flotilla-hub) and MEMBERS member clusters
# (flotilla-member-1 ...), the hub installed by its Helm chart, a join token
# from `kubectl flotilla token create --helm-values`, and an agent installed
# in every member by its chart with that token. Images are built from this
# checkout and `kind load`ed, never pulled: Flotilla's two images and the
# e2e test app under the names the specs deploy. It returns once every
# MemberCluster is Ready on the hub, and leaves kubeconfigs and the e2e
# suite's flags in $ARTIFACTS.
#
#   test/e2e-multikind/kind/up.sh                # hub + 3 members
#   MEMBERS=2 test/e2e-multikind/kind/up.sh      # hub + 2 members
#   SKIP_BUILD=1 test/e2e-multikind/kind/up.sh   # reuse the images already built
#
# It is safe to run again: existing clusters are reused and the charts are
# upgraded. common.sh lists every setting. Needs docker (running), kind,
# kubectl, helm and go; the repository's bin/ copies are used when present
# (make kind-bin builds them).
set -Eeuo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
trap 'printf "error: up.sh failed at line %d; the clusters are left as they are (rerun up.sh, or run down.sh)\n" "$LINENO" >&2' ERR
# Kubeconfigs and the join token land in $ARTIFACTS: keep them to this user.
umask 077

# --- preflight --------------------------------------------------------------
need docker "Install Docker: https://docs.docker.com/get-docker/"
docker info >/dev/null 2>&1 ||
	die "docker is installed but its daemon is not reachable: is it running, and may $(id -un) use it?"
need "$KIND" "Install kind, or run make kind-bin: https://kind.sigs.k8s.io/docs/user/quick-start/#installation"
need "$KUBECTL" "Install kubectl, or run make testbed-bin: https://kubernetes.io/docs/tasks/tools/"
need "$HELM" "Install helm, or run make helm-bin: https://helm.sh/docs/intro/install/"
need go "Go $(sed -n 's/^go //p' "$ROOT/go.mod") builds the images and kubectl-flotilla: https://go.dev/dl/"
check_members

mkdir -p "$ARTIFACTS"
ARTIFACTS=$(cd "$ARTIFACTS" && pwd -P)
mkdir -p "$ARTIFACTS"/{bin,kind,kubeconfigs}
HUB_KUBECONFIG=$ARTIFACTS/kubeconfigs/hub.kubeconfig

hub() { "$KUBECTL" --kubeconfig "$HUB_KUBECONFIG" "$@"; }
member_kubeconfig() { printf '%s/kubeconfigs/%s.kubeconfig\n' "$ARTIFACTS" "$(member_name "$1")"; }
member() {
	local i=$1
	shift
	"$KUBECTL" --kubeconfig "$(member_kubeconfig "$i")" "$@"
}

if [[ -n $KIND_NODE_IMAGE ]]; then
	log "node image: $KIND_NODE_IMAGE"
else
	log "node image: kind's default (needs a registry; make kind-image builds one offline)"
fi

# --- network ------------------------------------------------------------------
# The nodes' docker network, made here rather than by kind: kind lets Docker
# pick its IPv4 subnet, and Docker then refuses `docker network connect
# --ip`, which the partition spec needs to put a cut-off node back at the
# address its certificates and kubelet name. Options as kind's own (masquerade,
# the default bridge's MTU); IPv4 only, as the node image is.
ensure_network() {
	if docker network inspect "$KIND_NETWORK" >/dev/null 2>&1; then
		return
	fi
	local taken mtu prefix
	taken=$( {
		docker network ls -q | xargs -r docker network inspect -f '{{range .IPAM.Config}}{{.Subnet}} {{end}}'
		ip -4 route 2>/dev/null | awk '{print $1}'
	} | tr ' ' '\n' | grep -E '^[0-9]' | cut -d. -f1-2 | sort -u)
	for prefix in 172.28 172.29 172.30 172.31 10.213 10.214; do
		grep -qxF "$prefix" <<<"$taken" || break
		prefix=
	done
	[[ -n $prefix ]] || die "no free /16 for docker network $KIND_NETWORK (tried 172.28-31.0.0, 10.213-214.0.0); create it yourself with a --subnet, or set KIND_EXPERIMENTAL_DOCKER_NETWORK to one that has one"
	mtu=$(docker network inspect bridge -f '{{index .Options "com.docker.network.driver.mtu"}}' 2>/dev/null || true)
	log "creating docker network $KIND_NETWORK ($prefix.0.0/16${mtu:+, mtu $mtu})"
	docker network create -d bridge --subnet "$prefix.0.0/16" --gateway "$prefix.0.1" \
		-o com.docker.network.bridge.enable_ip_masquerade=true \
		${mtu:+-o "com.docker.network.driver.mtu=$mtu"} \
		--label dev.flotilla.kind-network=1 "$KIND_NETWORK" >/dev/null
}
ensure_network

# --- clusters -----------------------------------------------------------------
# create_cluster NAME CONFIG KUBECONFIG creates kind cluster NAME unless it
# exists, and writes its kubeconfig (the API server on 127.0.0.1) to
# KUBECONFIG without touching ~/.kube/config.
create_cluster() {
	local name=$1 config=$2 kubeconfig=$3
	if kind_cluster_exists "$name"; then
		log "kind cluster $name exists; reusing it"
	else
		log "creating kind cluster $name"
		local args=(create cluster --name "$name" --config "$config" --kubeconfig "$kubeconfig" --wait 180s)
		if [[ -n $KIND_NODE_IMAGE ]]; then
			args+=(--image "$KIND_NODE_IMAGE")
		fi
		local start=$SECONDS
		"$KIND" "${args[@]}"
		log "kind cluster $name created in $((SECONDS - start)) s"
	fi
	"$KIND" get kubeconfig --name "$name" >"$kubeconfig"
}

# kind_config NAME [LABELS...] prints a one-node cluster config. The kubelet
# patch lets it run on cgroup v1 hosts, which Kubernetes 1.35+ refuses by
# default; on cgroup v2 it changes nothing. The Service and pod ranges are
# kind's defaults, named so that they stay the ones the node image's
# entrypoint assumes on a node's first start, before kubeadm wrote them:
# it keeps the Service range inside the node (guard_service_range) and lets
# nothing but the docker network and the pod range out (guard_outside).
kind_config() {
	local name=$1
	shift
	cat <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: $name
networking:
  serviceSubnet: 10.96.0.0/16
  podSubnet: 10.244.0.0/16
kubeadmConfigPatches:
- |
  kind: KubeletConfiguration
  failCgroupV1: false
nodes:
- role: control-plane
EOF
	if (($# > 0)); then
		echo "  labels:"
		local kv
		for kv in "$@"; do
			echo "    ${kv%%=*}: ${kv#*=}"
		done
	fi
}

# bg NAME CMD... runs CMD in the background, its output in
# $ARTIFACTS/kind/NAME.log; bg_wait waits for every such job, prints each
# one's log, and dies naming those that failed. The member clusters are
# created and loaded, and the agents installed, side by side: most of a
# cluster's start is waiting (kubeadm, the kubelet, the static pods), so on
# 2 cores three at once take little longer than one.
bg_pids=() bg_names=()
# An up.sh that dies stops its jobs (each in a process group of its own,
# set -m) rather than leave them creating clusters.
trap '((${#bg_pids[@]} == 0)) || { kill -- $(printf -- "-%s " "${bg_pids[@]}") 2>/dev/null; wait; }' EXIT
bg() {
	local name=$1
	shift
	set -m
	"$@" >"$ARTIFACTS/kind/$name.log" 2>&1 &
	set +m
	bg_pids+=("$!")
	bg_names+=("$name")
}
bg_wait() {
	local i failed=()
	for i in "${!bg_pids[@]}"; do
		if ! wait "${bg_pids[$i]}"; then
			failed+=("${bg_names[$i]}")
		fi
		sed "s/^/[${bg_names[$i]}] /" "$ARTIFACTS/kind/${bg_names[$i]}.log" >&2
	done
	bg_pids=() bg_names=()
	((${#failed[@]} == 0)) || die "failed: ${failed[*]} (their output is above and in $ARTIFACTS/kind/<name>.log)"
}

# --- images -------------------------------------------------------------------
if [[ $SKIP_BUILD != 1 ]]; then
	"$KIND_DIR/images.sh"
fi
for image in "$HUB_IMAGE" "$AGENT_IMAGE" "${TESTAPP_IMAGES[@]}"; do
	docker image inspect "$image" >/dev/null 2>&1 ||
		die "image $image not found; run without SKIP_BUILD=1 to build it"
done

# --- clusters ----------------------------------------------------------------
# member_up I creates member I's cluster and loads the agent's and the test
# app's images into it.
member_up() {
	local i=$1 cluster
	cluster=$(member_cluster "$i")
	# Member i's node is labelled with its topology, as a cloud provider
	# would label it.
	kind_config "$cluster" \
		"topology.kubernetes.io/region=$(member_region "$i")" \
		"topology.kubernetes.io/zone=$(member_zone "$i")" \
		"flotilla.dev/provider=$(member_provider "$i")" >"$ARTIFACTS/kind/$cluster.yaml"
	create_cluster "$cluster" "$ARTIFACTS/kind/$cluster.yaml" "$(member_kubeconfig "$i")"
	log "loading the agent's and the test app's images into $cluster"
	"$KIND" load docker-image "$AGENT_IMAGE" "${TESTAPP_IMAGES[@]}" --name "$cluster"
}
for ((i = 1; i <= MEMBERS; i++)); do
	bg "$(member_cluster "$i")" member_up "$i"
done
kind_config "$HUB_CLUSTER" >"$ARTIFACTS/kind/$HUB_CLUSTER.yaml"
create_cluster "$HUB_CLUSTER" "$ARTIFACTS/kind/$HUB_CLUSTER.yaml" "$HUB_KUBECONFIG"
log "loading the hub's image into $HUB_CLUSTER"
"$KIND" load docker-image "$HUB_IMAGE" --name "$HUB_CLUSTER"

# image_id IMAGE prints the short ID of a local image. The charts put it in
# a pod annotation, so that a rerun with a rebuilt image under the same tag
# rolls the pods (helm sees a changed template) instead of leaving the old
# ones running.
image_id() { docker image inspect -f '{{.Id}}' "$1" | cut -d: -f2 | cut -c1-12; }

# --- hub ------------------------------------------------------------------------
# Agents reach the hub at its node's IP on kind's docker network, through
# the NodePort of the hub's sync Service; the hub's self-managed serving
# certificate names that IP besides its Service names.
HUB_NODE=$HUB_CLUSTER-control-plane
HUB_IP=$(docker inspect -f "{{with index .NetworkSettings.Networks \"$KIND_NETWORK\"}}{{.IPAddress}}{{end}}" "$HUB_NODE")
[[ -n $HUB_IP ]] ||
	die "container $HUB_NODE has no IPv4 address on docker network '$KIND_NETWORK' (set KIND_EXPERIMENTAL_DOCKER_NETWORK if kind uses another network)"
HUB_ADDRESS=$HUB_IP:$HUB_NODE_PORT
log "installing the hub (chart deploy/charts/flotilla-hub); agents will dial it at $HUB_ADDRESS"
"$HELM" upgrade --install flotilla-hub "$ROOT/deploy/charts/flotilla-hub" \
	--kubeconfig "$HUB_KUBECONFIG" -n flotilla-system --create-namespace \
	--set image.tag="$IMAGE_TAG" \
	--set service.type=NodePort --set service.nodePort="$HUB_NODE_PORT" \
	--set "certificates.servingHosts={$HUB_IP}" \
	--set-string "podAnnotations.flotilla\\.dev/image-id=$(image_id "$HUB_IMAGE")" \
	--wait --timeout "$WAIT_TIMEOUT"

# --- members --------------------------------------------------------------------
log "waiting for the member clusters"
bg_wait
log "creating a join token (kubectl flotilla token create --helm-values)"
(cd "$ROOT" && go build -o "$ARTIFACTS/bin/kubectl-flotilla" ./cmd/kubectl-flotilla)
JOIN_VALUES=$ARTIFACTS/join-values.yaml
"$ARTIFACTS/bin/kubectl-flotilla" --kubeconfig "$HUB_KUBECONFIG" token create \
	--auto-accept --ttl 1h --description "test/e2e-multikind/kind/up.sh" \
	--hub-address "$HUB_ADDRESS" --helm-values >"$JOIN_VALUES"

# agent_up I installs the agent in member I by its chart.
agent_up() {
	local i=$1
	"$HELM" upgrade --install flotilla-agent "$ROOT/deploy/charts/flotilla-agent" \
		--kubeconfig "$(member_kubeconfig "$i")" -n flotilla-system --create-namespace \
		-f "$JOIN_VALUES" \
		--set clusterName="$(member_name "$i")" \
		--set image.tag="$IMAGE_TAG" \
		--set certificates.join.region="$(member_region "$i")" \
		--set certificates.join.zone="$(member_zone "$i")" \
		--set certificates.join.provider="$(member_provider "$i")" \
		--set-string "podAnnotations.flotilla\\.dev/image-id=$(image_id "$AGENT_IMAGE")" \
		--wait --timeout "$WAIT_TIMEOUT"
}
members=()
for ((i = 1; i <= MEMBERS; i++)); do
	name=$(member_name "$i")
	members+=("$name")
	log "installing the agent in $name (chart deploy/charts/flotilla-agent)"
	bg "agent-$name" agent_up "$i"
done
bg_wait

# --- ready ------------------------------------------------------------------------
log "waiting for ${members[*]} to be Ready on the hub"
mc_names=()
for name in "${members[@]}"; do
	mc_names+=("membercluster/$name")
done
deadline=$((SECONDS + ${WAIT_TIMEOUT%s}))
until hub get "${mc_names[@]}" >/dev/null 2>&1; do
	((SECONDS < deadline)) || die "the members did not join: $(hub get memberclusters 2>&1)"
	sleep 2
done
if ! hub wait --for=condition=Ready --timeout="$WAIT_TIMEOUT" "${mc_names[@]}"; then
	hub get memberclusters -o wide >&2 || true
	die "not every member became Ready; see the hub's log (kubectl --kubeconfig $HUB_KUBECONFIG -n flotilla-system logs deploy/flotilla-hub) and the agents' (kubectl --kubeconfig $(member_kubeconfig 1) -n flotilla-system logs deploy/flotilla-agent)"
fi
hub get memberclusters -o wide

# --- artifacts ------------------------------------------------------------------
member_kubeconfigs=""
for ((i = 1; i <= MEMBERS; i++)); do
	member_kubeconfigs+="${member_kubeconfigs:+,}$(member_kubeconfig "$i")"
done
E2E_FLAGS="-provider=kind -hub-kubeconfig=$HUB_KUBECONFIG -member-kubeconfigs=$member_kubeconfigs"
printf '%s\n' "$E2E_FLAGS" >"$ARTIFACTS/e2e-flags"

cat <<EOF

Flotilla is up on kind: hub $HUB_CLUSTER, members ${members[*]} (Ready).
  hub kubeconfig:      $HUB_KUBECONFIG
  member kubeconfigs:  $member_kubeconfigs
  agents dial:         $HUB_ADDRESS

Try an example:
  $KUBECTL --kubeconfig $HUB_KUBECONFIG apply -f $ROOT/examples/duplicated.yaml
Run the e2e suite against these clusters (flags also in $ARTIFACTS/e2e-flags):
  go test -tags e2e -count=1 -timeout 60m ./test/e2e-multikind/ -v -args $E2E_FLAGS
Tear down:
  $KIND_DIR/down.sh
EOF
