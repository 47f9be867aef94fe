#!/usr/bin/env bash
# Builds Flotilla's two images, flotilla-hub and flotilla-agent, with no
# registry: the Go toolchain here compiles static binaries (CGO_ENABLED=0,
# the time zone database embedded), this script lays out a small build
# context (the binaries, a passwd and group with the nonroot user 65532, the
# CA bundle of this machine), and `docker build` packages them on the
# Dockerfile's runtime base, BASE: `scratch` by default (nothing to pull),
# or a registry image such as gcr.io/distroless/static-debian12:nonroot
# where one can be pulled.
#
# Settings (environment):
#   IMAGE_REPO   repository prefix (default ghcr.io/flotilla-dev)
#   IMAGE_TAG    tag (default: git describe, else dev)
#   BASE         runtime base image (default scratch)
#   ARCH         GOARCH of the images (default: this machine's)
#   VERSION      version the binaries report (default IMAGE_TAG)
#   CA_BUNDLE    CA certificates copied in (default /etc/ssl/certs/ca-certificates.crt)
#   GO_TAGS      build tags besides timetzdata (default grpcnotrace: no gRPC
#                x/net/trace, which keeps the executables a quarter smaller;
#                docs/architecture.md, "Executable size")
#   IMAGE_CONTEXT  the build context directory, emptied first (default
#                _output/image); two builds at once need one each
set -euo pipefail
# Whatever the caller's umask (up.sh keeps its artifacts private), what goes
# into an image is readable and its binaries executable by the image's
# non-root user: a 0700 / in an image is "exec: permission denied".
umask 022

root=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
IMAGE_REPO=${IMAGE_REPO:-ghcr.io/flotilla-dev}
IMAGE_TAG=${IMAGE_TAG:-$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo dev)}
BASE=${BASE:-scratch}
ARCH=${ARCH:-$($GO env GOARCH)}
VERSION=${VERSION:-$IMAGE_TAG}
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

die() { echo "make images: $*" >&2; exit 1; }

command -v docker >/dev/null 2>&1 ||
	die "no docker command on this machine: images need a Docker engine (install docker.io, or Docker Engine, and start it)"
if ! out=$(docker version --format '{{.Server.Version}}' 2>&1); then
	die "no Docker engine answers (${DOCKER_HOST:-unix:///var/run/docker.sock}): $(echo "$out" | tail -1)"
fi
[[ -r $CA_BUNDLE ]] ||
	die "no CA bundle at $CA_BUNDLE: install Debian's ca-certificates or set CA_BUNDLE (the hub and agents verify TLS to apiservers and Prometheus with it)"

ctx=${IMAGE_CONTEXT:-$root/_output/image}
rm -rf "$ctx"
mkdir -p "$ctx/rootfs/etc/ssl/certs" "$ctx/$ARCH"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ctx/rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$ctx/rootfs/etc/group"
cp "$CA_BUNDLE" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"

echo "compiling hub and agent for linux/$ARCH (version $VERSION)"
for cmd in hub agent; do
	(cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH="$ARCH" $GO build -trimpath -tags "timetzdata,${GO_TAGS:-grpcnotrace}" \
		-ldflags "-s -w -X github.com/flotilla-dev/flotilla/$cmd/setup.Version=$VERSION" \
		-o "$ctx/$ARCH/$cmd" "./$cmd")
done

for cmd in hub agent; do
	image="$IMAGE_REPO/flotilla-$cmd:$IMAGE_TAG"
	echo "building $image on $BASE"
	# The classic builder and BuildKit both take this Dockerfile: no
	# BuildKit-only syntax, nothing fetched but BASE.
	docker build -q --target "$cmd" --build-arg BASE="$BASE" --build-arg ARCH="$ARCH" \
		--label org.opencontainers.image.version="$VERSION" \
		-f "$root/Dockerfile" -t "$image" "$ctx" >/dev/null
	echo "built $image"
done
