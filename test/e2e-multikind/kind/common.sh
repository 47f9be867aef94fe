# shellcheck shell=bash disable=SC2034  # the variables are for the scripts that source this
# Settings and helpers shared by up.sh and down.sh. Sourced, not run.
#
# Every setting can be overridden from the environment:
#   MEMBERS         number of member clusters (default 3)
#   ARTIFACTS       where kubeconfigs, the join values, kind configs and
#                   logs go (default test/e2e-multikind/artifacts/kind,
#                   which git ignores)
#   IMAGE_TAG       tag of the hub and agent images built and loaded (default e2e)
#   SKIP_BUILD      1: don't build the images, load the ones already tagged
#   KIND_NODE_IMAGE node image for every cluster (default: the one make
#                   kind-image built, named in bin/kind-node-image; else kind's own)
#   HUB_NODE_PORT   NodePort of the hub's sync Service (default 30443)
#   KIND, KUBECTL, HELM  the commands (default: bin/kind, bin/kubectl,
#                   bin/helm when present, else from PATH)
#   WAIT_TIMEOUT    how long to wait for rollouts and Ready members (default 300s)
#   KIND_EXPERIMENTAL_DOCKER_NETWORK  the docker network of the nodes
#                   (default flotilla-kind, which up.sh creates with a
#                   subnet of its own so that a cut-off node can be
#                   reconnected at its old address; down.sh removes it)

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd -P)
KIND_DIR=$ROOT/test/e2e-multikind/kind

MEMBERS=${MEMBERS:-3}
ARTIFACTS=${ARTIFACTS:-$ROOT/test/e2e-multikind/artifacts/kind}
IMAGE_TAG=${IMAGE_TAG:-e2e}
SKIP_BUILD=${SKIP_BUILD:-0}
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-$(cat "$ROOT/bin/kind-node-image" 2>/dev/null || true)}
HUB_NODE_PORT=${HUB_NODE_PORT:-30443}
WAIT_TIMEOUT=${WAIT_TIMEOUT:-300s}
KIND_NETWORK=${KIND_EXPERIMENTAL_DOCKER_NETWORK:-flotilla-kind}
# kind reads the network from here.
export KIND_EXPERIMENTAL_DOCKER_NETWORK=$KIND_NETWORK

# bin_or_path NAME prints bin/NAME when it is there, else NAME.
bin_or_path() {
	if [[ -x $ROOT/bin/$1 ]]; then
		printf '%s\n' "$ROOT/bin/$1"
	else
		printf '%s\n' "$1"
	fi
}
KIND=${KIND:-$(bin_or_path kind)}
KUBECTL=${KUBECTL:-$(bin_or_path kubectl)}
HELM=${HELM:-$(bin_or_path helm)}

HUB_CLUSTER=flotilla-hub
MEMBER_CLUSTER_PREFIX=flotilla-member-
IMAGE_REPO=ghcr.io/flotilla-dev
HUB_IMAGE=$IMAGE_REPO/flotilla-hub:$IMAGE_TAG
AGENT_IMAGE=$IMAGE_REPO/flotilla-agent:$IMAGE_TAG
# The e2e test app (test/e2e-multikind/testapp) under every name the specs
# deploy; testapp-images.sh builds them and says which behaves how.
TESTAPP_IMAGES=(
	registry.example.com/team/web:1.0
	registry.example.com/team/web:1.1
	mirror.example.com/team/web:2.0
	registry.example.com/team/web:flotilla-fail
	registry.example.com/team/web:flotilla-crashloop
	registry.example.com/team/proxy:3.1
)

# Member i (from 1) lives where the local testbed puts its member i, so the
# examples and the e2e suite see the same topology on both providers.
REGIONS=(eu-west us-east ap-south)
PROVIDERS=(aws gcp onprem)

log() { printf '==> %s\n' "$*" >&2; }
die() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}

# need CMD HINT fails with HINT unless CMD is on PATH.
need() {
	command -v "$1" >/dev/null 2>&1 || die "$1 is required but not on PATH. $2"
}

# check_members fails unless MEMBERS is a positive integer.
check_members() {
	[[ $MEMBERS =~ ^[1-9][0-9]*$ ]] || die "MEMBERS must be a positive integer, got '$MEMBERS'"
}

# member_name i: the MemberCluster name of member i (member-1, ...).
member_name() { printf 'member-%d\n' "$1"; }
# member_cluster i: the kind cluster name of member i.
member_cluster() { printf '%s%d\n' "$MEMBER_CLUSTER_PREFIX" "$1"; }
member_region() { printf '%s\n' "${REGIONS[$((($1 - 1) % ${#REGIONS[@]}))]}"; }
member_zone() { printf '%s-a\n' "$(member_region "$1")"; }
member_provider() { printf '%s\n' "${PROVIDERS[$((($1 - 1) % ${#PROVIDERS[@]}))]}"; }

# kind_cluster_exists NAME. (grep without -q reads all of kind's output, so
# pipefail never sees kind die of SIGPIPE.)
kind_cluster_exists() {
	"$KIND" get clusters 2>/dev/null | grep -x -- "$1" >/dev/null
}
