#!/usr/bin/env bash
# Builds the kind node image Flotilla's kind e2e runs on, with no registry
# and no internet: only Debian's packages and binaries built from Go modules.
#
#   hack/kind/build-node-image.sh        (make kind-image)
#   hack/kind/build-node-image.sh roots  only the cached Debian roots (no Go
#                                        binaries needed: network-bound, so
#                                        it can run beside the Go builds)
#
# The image is tagged flotilla.dev/kind-node:<kubernetes version>-<hash>,
# where the hash covers everything that goes into it (this script, the files
# in hack/kind/node, the package lists and every binary). When that tag
# exists the build is skipped, so a second run costs a few seconds. The tag
# is written to $BIN/kind-node-image for make e2e-kind.
#
# What goes in (docs/e2e-kind.md explains each choice):
#   - a Debian ($DEBIAN_SUITE) root made by debootstrap, with systemd,
#     iptables / nftables, conntrack, runc and the CNI plugins from Debian's
#     packages; cached as a tarball in $BIN/kind-cache per package list;
#   - containerd, its runc shim, ctr, crictl, kubelet, kubeadm and kubectl
#     from $BIN (make kind-bin);
#   - Flotilla's own node files (hack/kind/node): entrypoint, systemd units,
#     containerd configuration, a static ptp CNI configuration;
#   - the control-plane images kubeadm asks for (kubeadm config images
#     list), built from $BIN's binaries and preloaded into the node's
#     containerd under their registry.k8s.io names: kube-apiserver,
#     kube-controller-manager, kube-scheduler and etcd (the binary alone),
#     kube-proxy (on a small Debian root with iptables and nftables), CoreDNS
#     and pause.
#
# Needs root (debootstrap, chroot) and a Docker engine. Settings:
#   BIN            where the binaries are and the tag is written (./bin)
#   DEBIAN_SUITE   Debian release of the node's root (trixie)
#   DEBIAN_MIRROR  Debian mirror (http://deb.debian.org/debian); an
#                  air-gapped site points this at its own mirror
#   KIND_IMAGE_REBUILD=1  build even when the tag exists
set -Eeuo pipefail
# Image files must be readable by their non-root users whatever the caller's umask.
umask 022

root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$root/bin}
node_files=$root/hack/kind/node
suite=${DEBIAN_SUITE:-trixie}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
k8s_version=$(sed -n 's/^K8S_VERSION=//p' "$root/hack/build-testbed-bin.sh")
repo=flotilla.dev/kind-node

log() { printf '%s kind-image: %s\n' "$(date +%T)" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# Packages of the node's root: systemd as init; what the kubelet, kubeadm
# and kube-proxy's node side run (iptables, nftables, conntrack, ethtool,
# socat, mount, util-linux, kmod); the OCI runtime and CNI plugins; and what
# the entrypoint uses.
node_packages=(systemd systemd-sysv dbus ca-certificates procps iproute2
	iptables nftables conntrack ebtables ethtool socat util-linux mount kmod
	e2fsprogs pigz libseccomp2 runc containernetworking-plugins)
# Packages of kube-proxy's image: its iptables and nftables modes exec these.
proxy_packages=(iptables nftables conntrack)

node_binaries=(containerd containerd-shim-runc-v2 ctr crictl kubelet kubeadm kubectl)
image_binaries=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd coredns pause)

[[ $(id -u) == 0 ]] || die "needs root (debootstrap and chroot); run it as root or with sudo"
command -v docker >/dev/null || die "needs docker"
docker info >/dev/null 2>&1 || die "the Docker daemon is not reachable"
command -v debootstrap >/dev/null || die "needs debootstrap (apt-get install debootstrap)"
mode=${1:-image}
[[ $mode == image || $mode == roots ]] || die "unknown mode $mode (want: roots, or none)"
if [[ $mode == image ]]; then
	for b in "${node_binaries[@]}" "${image_binaries[@]}"; do
		[[ -x $bin/$b ]] || die "$bin/$b is missing: run make kind-bin first"
	done
fi
[[ -n $k8s_version ]] || die "no K8S_VERSION in hack/build-testbed-bin.sh"

# --- the tag: a hash over every input ----------------------------------------
hash=
[[ $mode == roots ]] || hash=$(
	{
		echo "$suite ${node_packages[*]} / ${proxy_packages[*]}"
		sha256sum "$0"
		(cd "$node_files" && find . -type f | LC_ALL=C sort | xargs sha256sum)
		(cd "$bin" && sha256sum "${node_binaries[@]}" "${image_binaries[@]}")
	} | sha256sum | cut -c1-12
)
image=$repo:$k8s_version-${hash:-}
if [[ $mode == image && ${KIND_IMAGE_REBUILD:-} != 1 ]] && docker image inspect "$image" >/dev/null 2>&1; then
	log "$image is built already"
	echo "$image" >"$bin/kind-node-image"
	exit 0
fi
[[ $mode == roots ]] || log "building $image"
start=$SECONDS

work=$(mktemp -d "${TMPDIR:-/tmp}/flotilla-kind-image.XXXXXX")
builder=flotilla-kind-image-build-$$
cleanup() {
	docker rm -f "$builder" >/dev/null 2>&1 || true
	# Intermediate images: none stays, whether the build worked or not.
	docker images --format '{{.Repository}}:{{.Tag}}' |
		grep -E "^$repo-build(/[^:]*)?:${hash:-none}" | xargs -r docker rmi >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

# --- Debian roots, cached per suite and package list ---------------------------
cache=$bin/kind-cache
mkdir -p "$cache"
# debian_root NAME PACKAGES... prints the path of a tarball of a minimal
# Debian root with PACKAGES, made by debootstrap unless cached.
debian_root() {
	local name=$1
	shift
	local key
	key=$(echo "$suite $*" | sha256sum | cut -c1-12)
	local tarball=$cache/$name-$suite-$key.tar
	if [[ ! -s $tarball ]]; then
		log "debootstrap $suite for $name (${*})"
		local dir=$work/debootstrap-$name
		debootstrap --variant=minbase --include="$(
			IFS=,
			echo "$*"
		)" "$suite" "$dir" "$mirror" >"$work/debootstrap-$name.log" 2>&1 ||
			die "debootstrap failed; its log: $(tail -5 "$work/debootstrap-$name.log")"
		# No package caches, lists, docs or locales in an image.
		rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* \
			"$dir"/usr/share/doc "$dir"/usr/share/man "$dir"/usr/share/locale \
			"$dir"/usr/share/info
		tar -C "$dir" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
		rm -rf "$dir"
	fi
	echo "$tarball"
}
node_root=$(debian_root node "${node_packages[@]}")
proxy_root=$(debian_root kube-proxy "${proxy_packages[@]}")
if [[ $mode == roots ]]; then
	log "Debian roots ready in $cache ($((SECONDS - start)) s)"
	exit 0
fi

# --- control-plane images --------------------------------------------------------
mapfile -t wanted < <("$bin/kubeadm" config images list --kubernetes-version "$k8s_version" 2>/dev/null)
((${#wanted[@]} >= 6)) || die "kubeadm config images list gave ${#wanted[@]} images: ${wanted[*]}"
# Built under private names, so a registry.k8s.io image the user already has
# in Docker is never overwritten; renamed inside the node's containerd.
images=()
declare -A target
for ref in "${wanted[@]}"; do
	name=${ref##*/}
	name=${name%%:*}
	stage=$work/image-$name
	mkdir -p "$stage"
	changes=(--change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin')
	case $name in
	kube-apiserver | kube-controller-manager | kube-scheduler | etcd)
		install -D -m 0755 "$bin/$name" "$stage/usr/local/bin/$name"
		;;
	kube-proxy)
		tar -C "$stage" -xf "$proxy_root"
		install -D -m 0755 "$bin/kube-proxy" "$stage/usr/local/bin/kube-proxy"
		;;
	coredns)
		install -D -m 0755 "$bin/coredns" "$stage/coredns"
		changes+=(--change 'ENTRYPOINT ["/coredns"]')
		;;
	pause)
		install -D -m 0755 "$bin/pause" "$stage/pause"
		changes+=(--change 'ENTRYPOINT ["/pause"]')
		;;
	*) die "kubeadm asks for $ref, which this script does not know how to build" ;;
	esac
	# Binaries that expect /tmp and /etc/passwd get them.
	mkdir -p "$stage/tmp" "$stage/etc"
	chmod 1777 "$stage/tmp"
	[[ -f $stage/etc/passwd ]] || echo 'root:x:0:0:root:/root:/sbin/nologin' >"$stage/etc/passwd"
	build_ref=$repo-build/$name:$hash
	tar -C "$stage" -c . | docker import "${changes[@]}" - "$build_ref" >/dev/null
	rm -rf "$stage"
	images+=("$build_ref")
	target[$build_ref]=$ref
	log "image $ref"
done

# --- the node's root ----------------------------------------------------------------
rootfs=$work/rootfs
mkdir -p "$rootfs"
tar -C "$rootfs" -xf "$node_root"
cp -a "$node_files"/. "$rootfs"/
for b in containerd containerd-shim-runc-v2 ctr crictl; do
	install -m 0755 "$bin/$b" "$rootfs/usr/local/bin/$b"
done
for b in kubelet kubeadm kubectl; do
	install -m 0755 "$bin/$b" "$rootfs/usr/bin/$b"
done
echo "$k8s_version" >"$rootfs/kind/version"
mkdir -p "$rootfs/etc/kubernetes/manifests" "$rootfs/var/lib/kubelet"
# systemd in a container: start only what a node needs. No getty, udev,
# timers or kernel log reading; binfmt is kernel-global, so never.
rm -f "$rootfs"/etc/systemd/system/*.wants/* \
	"$rootfs"/lib/systemd/system/multi-user.target.wants/* \
	"$rootfs"/lib/systemd/system/local-fs.target.wants/* \
	"$rootfs"/lib/systemd/system/sockets.target.wants/*udev* \
	"$rootfs"/lib/systemd/system/sockets.target.wants/*initctl* \
	"$rootfs"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$rootfs/etc/systemd/journald.conf"
chroot "$rootfs" systemctl enable containerd.service kubelet.service >/dev/null 2>&1
chroot "$rootfs" systemctl mask systemd-binfmt.service >/dev/null 2>&1
: >"$rootfs/etc/machine-id"
tar -C "$rootfs" -c . | docker import - "$repo-build:$hash" >/dev/null
rm -rf "$rootfs"
log "node root imported"

# --- preload the control-plane images into the node's containerd -------------------
# containerd runs in a container of the node root for the import; the
# layers stay packed (--no-unpack: the build container's root cannot hold
# overlay mounts) and are unpacked by the node's containerd when a pod first
# uses them. Pinned, so the kubelet's image GC never removes them.
# The build container is privileged, as kind's nodes are: Docker must be
# able to start one, which on some hosts needs docker-setup.sh's runtime
# (it says what it changes). On a fresh machine this is the first
# privileged container, before make e2e-kind's own call of it.
BIN=$bin "$root/hack/kind/docker-setup.sh"
docker run -d --name "$builder" --privileged --entrypoint sleep "$repo-build:$hash" infinity >/dev/null
docker exec "$builder" sh -c 'nohup containerd --log-level error >/var/log/containerd-build.log 2>&1 &'
for _ in $(seq 1 60); do
	docker exec "$builder" ctr version >/dev/null 2>&1 && break
	sleep 0.5
done
docker exec "$builder" ctr version >/dev/null 2>&1 ||
	die "containerd did not start in the build container: $(docker exec "$builder" tail -5 /var/log/containerd-build.log)"
docker save "${images[@]}" |
	docker exec -i "$builder" ctr --namespace=k8s.io images import \
		--label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack - >/dev/null
for build_ref in "${images[@]}"; do
	ref=${target[$build_ref]}
	docker exec "$builder" ctr --namespace=k8s.io images tag --force "$build_ref" "$ref" >/dev/null
	docker exec "$builder" ctr --namespace=k8s.io images label "$ref" io.cri-containerd.pinned=pinned >/dev/null
	docker exec "$builder" ctr --namespace=k8s.io images rm "$build_ref" >/dev/null
done
loaded=$(docker exec "$builder" ctr --namespace=k8s.io images list -q)
for ref in "${wanted[@]}"; do
	grep -qxF "$ref" <<<"$loaded" || die "$ref is not in the node's containerd after the import"
done
# (The CRI plugin adds a sha256:<config digest> name per image: its image IDs.)
extra=$(grep -v '^sha256:' <<<"$loaded" | grep -vxF -f <(printf '%s\n' "${wanted[@]}") || true)
[[ -z $extra ]] || die "the node's containerd holds more than the control-plane images: $extra"
# (sleep, the container's PID 1, reaps no one: the stopped containerd stays a
# zombie, so only live states count.)
docker exec "$builder" sh -c 'pkill containerd; while pgrep -x -r D,R,S,T containerd >/dev/null; do sleep 0.2; done; rm -f /var/log/containerd-build.log'
docker commit "$builder" "$repo-build:$hash-loaded" >/dev/null
docker rm -f "$builder" >/dev/null

# --- the final image: what kind runs ---------------------------------------------------
# kind starts the node with the image's entrypoint and command; SIGRTMIN+3
# makes systemd shut down cleanly on docker stop.
cat >"$work/Dockerfile" <<EOF
FROM $repo-build:$hash-loaded
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
LABEL dev.flotilla.kind-node.kubernetes="$k8s_version" dev.flotilla.kind-node.debian="$suite"
EOF
DOCKER_BUILDKIT=0 docker build -q -t "$image" "$work" >/dev/null
echo "$image" >"$bin/kind-node-image"
# Earlier builds of this Kubernetes version (other hashes) are stale: each
# is over a GiB, so they go. Other versions stay.
docker images --format '{{.Repository}}:{{.Tag}}' |
	grep -E "^$repo:$k8s_version-[0-9a-f]{12}$" | grep -vxF "$image" | xargs -r docker rmi >/dev/null 2>&1 || true
log "built $image in $((SECONDS - start)) s ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%d MiB", $1/1048576}'))"
