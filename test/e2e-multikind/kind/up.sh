#!/usr/bin/env bash
# up.sh brings up Flotilla on kind: a hub cluster (flotilla-hub) and MEMBERS
# member clusters (flotilla-member-1 ...), the hub and agent images built from
# this checkout and loaded into them, certificates from flotilla-pki, the hub
# from deploy/hub, one MemberCluster per member, and an agent per member from
# deploy/agent. It returns once every MemberCluster is Ready on the hub, and
# leaves kubeconfigs and the e2e suite's flags in $ARTIFACTS.
#
#   test/e2e-multikind/kind/up.sh                # hub + 3 members
#   MEMBERS=2 test/e2e-multikind/kind/up.sh      # hub + 2 members
#   SKIP_BUILD=1 test/e2e-multikind/kind/up.sh   # reuse the images already built
#
# It is safe to run again: existing clusters are reused, certificates that
# are still valid are kept, and manifests are re-applied. common.sh lists
# every setting. Needs docker (running), kind, kubectl and go.
set -Eeuo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
trap 'printf "error: up.sh failed at line %d; the clusters are left as they are (rerun up.sh, or run down.sh)\n" "$LINENO" >&2' ERR
# Kubeconfigs and private keys land in $ARTIFACTS: keep them to this user.
umask 077

# --- preflight --------------------------------------------------------------
need docker "Install Docker: https://docs.docker.com/get-docker/"
docker info >/dev/null 2>&1 ||
	die "docker is installed but its daemon is not reachable: is it running, and may $(id -un) use it?"
need kind "Install kind: https://kind.sigs.k8s.io/docs/user/quick-start/#installation"
need go "Go $(sed -n 's/^go //p' "$ROOT/go.mod") builds flotilla-pki: https://go.dev/dl/"
if [[ -x $ROOT/bin/kubectl ]]; then
	KUBECTL=$ROOT/bin/kubectl
else
	need kubectl "Install kubectl: https://kubernetes.io/docs/tasks/tools/"
	KUBECTL=kubectl
fi
check_members

mkdir -p "$ARTIFACTS"
ARTIFACTS=$(cd "$ARTIFACTS" && pwd -P)
mkdir -p "$ARTIFACTS"/{bin,kind,kubeconfigs,overlays,pki}
PKI=$ARTIFACTS/pki
HUB_KUBECONFIG=$ARTIFACTS/kubeconfigs/hub.kubeconfig

hub() { "$KUBECTL" --kubeconfig "$HUB_KUBECONFIG" "$@"; }
member() {
	local i=$1
	shift
	"$KUBECTL" --kubeconfig "$ARTIFACTS/kubeconfigs/$(member_name "$i").kubeconfig" "$@"
}

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
		local args=(create cluster --name "$name" --config "$config" --kubeconfig "$kubeconfig" --wait 120s)
		if [[ -n $KIND_NODE_IMAGE ]]; then
			args+=(--image "$KIND_NODE_IMAGE")
		fi
		kind "${args[@]}"
	fi
	kind get kubeconfig --name "$name" >"$kubeconfig"
}

cat >"$ARTIFACTS/kind/$HUB_CLUSTER.yaml" <<EOF
# The hub cluster: one node, which runs the hub and nothing else.
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: $HUB_CLUSTER
nodes:
- role: control-plane
EOF
create_cluster "$HUB_CLUSTER" "$ARTIFACTS/kind/$HUB_CLUSTER.yaml" "$HUB_KUBECONFIG"

for ((i = 1; i <= MEMBERS; i++)); do
	cluster=$(member_cluster "$i")
	cat >"$ARTIFACTS/kind/$cluster.yaml" <<EOF
# Member $(member_name "$i"): one node labelled with its topology, as a
# cloud provider would label it.
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: $cluster
nodes:
- role: control-plane
  labels:
    topology.kubernetes.io/region: $(member_region "$i")
    topology.kubernetes.io/zone: $(member_zone "$i")
    flotilla.dev/provider: $(member_provider "$i")
EOF
	create_cluster "$cluster" "$ARTIFACTS/kind/$cluster.yaml" "$ARTIFACTS/kubeconfigs/$(member_name "$i").kubeconfig"
done

# --- images -------------------------------------------------------------------
if [[ $SKIP_BUILD != 1 ]]; then
	log "building $HUB_IMAGE and $AGENT_IMAGE"
	IMAGE_REPO=ghcr.io/flotilla-dev IMAGE_TAG="$IMAGE_TAG" "$ROOT/hack/build-images.sh"
fi
for image in "$HUB_IMAGE" "$AGENT_IMAGE"; do
	docker image inspect "$image" >/dev/null 2>&1 ||
		die "image $image not found; run without SKIP_BUILD=1 to build it"
done
log "loading the images into the clusters"
kind load docker-image "$HUB_IMAGE" --name "$HUB_CLUSTER"
for ((i = 1; i <= MEMBERS; i++)); do
	kind load docker-image "$AGENT_IMAGE" --name "$(member_cluster "$i")"
done

# --- certificates -------------------------------------------------------------
# Agents reach the hub at its node's IP on kind's docker network, through the
# NodePort of the flotilla-hub Service; the hub's certificate must name that
# IP, as well as the Service names used inside the hub cluster (the
# webhook's above all: the hub apiserver verifies it).
HUB_NODE=$HUB_CLUSTER-control-plane
HUB_IP=$(docker inspect -f "{{with index .NetworkSettings.Networks \"$KIND_NETWORK\"}}{{.IPAddress}}{{end}}" "$HUB_NODE")
[[ -n $HUB_IP ]] ||
	die "container $HUB_NODE has no IPv4 address on docker network '$KIND_NETWORK' (set KIND_EXPERIMENTAL_DOCKER_NETWORK if kind uses another network)"
HUB_ADDRESS=$HUB_IP:$HUB_NODE_PORT
log "agents will dial the hub at $HUB_ADDRESS"

log "issuing certificates into $PKI"
(cd "$ROOT" && go build -o "$ARTIFACTS/bin/flotilla-pki" ./cmd/flotilla-pki)
PKI_BIN=$ARTIFACTS/bin/flotilla-pki
"$PKI_BIN" -dir "$PKI" ca
hub_hosts=()
for svc in flotilla-hub flotilla-hub-headless flotilla-hub-webhook; do
	for name in "$svc" "$svc.flotilla-system" "$svc.flotilla-system.svc" "$svc.flotilla-system.svc.cluster.local"; do
		hub_hosts+=(-host "$name")
	done
done
hub_hosts+=(-host "$HUB_IP")
"$PKI_BIN" -dir "$PKI" hub "${hub_hosts[@]}"
members=()
for ((i = 1; i <= MEMBERS; i++)); do
	members+=("$(member_name "$i")")
done
"$PKI_BIN" -dir "$PKI" agent "${members[@]}"
CA_BUNDLE=$(base64 <"$PKI/ca.crt" | tr -d '\n')

# apply_secret KUBECTL-FUNCTION [ARG] NAME KEY=FILE... creates or updates a
# generic Secret in flotilla-system.
apply_secret() {
	local kc=("$1") name files=() kv
	shift
	if [[ ${kc[0]} == member ]]; then
		kc+=("$1")
		shift
	fi
	name=$1
	shift
	for kv in "$@"; do
		files+=(--from-file="$kv")
	done
	"${kc[@]}" -n flotilla-system create secret generic "$name" "${files[@]}" --dry-run=client -o yaml |
		"${kc[@]}" apply -f -
}

# --- hub ----------------------------------------------------------------------
log "installing the hub"
hub apply --server-side -f "$ROOT/deploy/hub/namespace.yaml"
apply_secret hub flotilla-hub-certs "ca.crt=$PKI/ca.crt" "hub.crt=$PKI/hub.crt" "hub.key=$PKI/hub.key"
HUB_CERTS_SHA=$(cat "$PKI/ca.crt" "$PKI/hub.crt" | sha256)
HUB_OVERLAY=$ARTIFACTS/overlays/hub
mkdir -p "$HUB_OVERLAY"
# Generated: overlays/hub plus what only this run knows. The certificate
# checksum annotation rolls the hub when its certificate is reissued.
cat >"$HUB_OVERLAY/kustomization.yaml" <<EOF
# Generated by test/e2e-multikind/kind/up.sh; rewritten on every run.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $(relpath "$HUB_OVERLAY" "$KIND_DIR/overlays/hub")
images:
- name: ghcr.io/flotilla-dev/flotilla-hub
  newTag: "$IMAGE_TAG"
patches:
- target:
    group: admissionregistration.k8s.io
    kind: MutatingWebhookConfiguration
    name: flotilla-hub
  patch: |-
    - op: replace
      path: /webhooks/0/clientConfig/caBundle
      value: $CA_BUNDLE
- target:
    group: admissionregistration.k8s.io
    kind: ValidatingWebhookConfiguration
    name: flotilla-hub
  patch: |-
    - op: replace
      path: /webhooks/0/clientConfig/caBundle
      value: $CA_BUNDLE
- target:
    kind: Deployment
    name: flotilla-hub
  patch: |-
    - op: add
      path: /spec/template/metadata/annotations/flotilla.dev~1certs-sha256
      value: "$HUB_CERTS_SHA"
EOF
hub apply --server-side --force-conflicts -k "$HUB_OVERLAY"
hub wait --for=condition=Established --timeout=60s \
	crd/myapps.flotilla.dev crd/memberclusters.flotilla.dev crd/works.flotilla.dev
hub -n flotilla-system rollout status deployment/flotilla-hub --timeout="$WAIT_TIMEOUT"

# --- members --------------------------------------------------------------------
# The MemberCluster comes first: the hub refuses agents of clusters it doesn't
# know.
log "registering ${members[*]} on the hub"
for ((i = 1; i <= MEMBERS; i++)); do
	hub apply -f - <<EOF
apiVersion: flotilla.dev/v1alpha1
kind: MemberCluster
metadata:
  name: $(member_name "$i")
spec:
  region: $(member_region "$i")
  zone: $(member_zone "$i")
  provider: $(member_provider "$i")
EOF
done

for ((i = 1; i <= MEMBERS; i++)); do
	name=$(member_name "$i")
	log "installing the agent in $name"
	member "$i" apply --server-side -f "$ROOT/deploy/agent/namespace.yaml"
	apply_secret member "$i" flotilla-agent-certs \
		"tls.crt=$PKI/agent-$name.crt" "tls.key=$PKI/agent-$name.key" "ca.crt=$PKI/ca.crt"
	AGENT_CERTS_SHA=$(cat "$PKI/ca.crt" "$PKI/agent-$name.crt" | sha256)
	overlay=$ARTIFACTS/overlays/agent-$name
	mkdir -p "$overlay"
	cat >"$overlay/kustomization.yaml" <<EOF
# Generated by test/e2e-multikind/kind/up.sh; rewritten on every run.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $(relpath "$overlay" "$KIND_DIR/overlays/agent")
configMapGenerator:
- name: flotilla-agent-config
  namespace: flotilla-system
  behavior: merge
  literals:
  - hub-address=$HUB_ADDRESS
  - cluster-name=$name
images:
- name: ghcr.io/flotilla-dev/flotilla-agent
  newTag: "$IMAGE_TAG"
patches:
- target:
    kind: Deployment
    name: flotilla-agent
  patch: |-
    - op: add
      path: /spec/template/metadata/annotations/flotilla.dev~1certs-sha256
      value: "$AGENT_CERTS_SHA"
EOF
	member "$i" apply --server-side --force-conflicts -k "$overlay"
	member "$i" -n flotilla-system rollout status deployment/flotilla-agent --timeout="$WAIT_TIMEOUT"
done

# --- ready ------------------------------------------------------------------------
log "waiting for ${members[*]} to be Ready on the hub"
mc_names=()
for name in "${members[@]}"; do
	mc_names+=("membercluster/$name")
done
if ! hub wait --for=condition=Ready --timeout="$WAIT_TIMEOUT" "${mc_names[@]}"; then
	hub get memberclusters -o wide >&2 || true
	die "not every member became Ready; see the hub's log (kubectl --kubeconfig $HUB_KUBECONFIG -n flotilla-system logs deploy/flotilla-hub) and the agents' (kubectl --kubeconfig $ARTIFACTS/kubeconfigs/member-1.kubeconfig -n flotilla-system logs deploy/flotilla-agent)"
fi
hub get memberclusters -o wide

# --- artifacts ------------------------------------------------------------------
member_kubeconfigs=""
for name in "${members[@]}"; do
	member_kubeconfigs+="${member_kubeconfigs:+,}$ARTIFACTS/kubeconfigs/$name.kubeconfig"
done
E2E_FLAGS="-provider=kind -hub-kubeconfig=$HUB_KUBECONFIG -member-kubeconfigs=$member_kubeconfigs"
printf '%s\n' "$E2E_FLAGS" >"$ARTIFACTS/e2e-flags"

cat <<EOF

Flotilla is up on kind: hub $HUB_CLUSTER, members ${members[*]} (Ready).
  hub kubeconfig:      $HUB_KUBECONFIG
  member kubeconfigs:  $member_kubeconfigs
  agents dial:         $HUB_ADDRESS
  CA and certificates: $PKI

Try an example:
  kubectl --kubeconfig $HUB_KUBECONFIG apply -f $ROOT/examples/duplicated.yaml
Run the e2e suite against these clusters (flags also in $ARTIFACTS/e2e-flags):
  go test -tags e2e -count=1 -timeout 30m ./test/e2e-multikind/ -v -args $E2E_FLAGS
Tear down:
  $KIND_DIR/down.sh
EOF
