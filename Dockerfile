# Flotilla's two images from one Dockerfile; `make images` builds both
# (hack/build-images.sh): it compiles the static binaries with the Go
# toolchain of the build machine and lays out the build context this file
# reads (_output/image: rootfs/ with /etc/passwd, /etc/group and the CA
# bundle; ARCH/hub and ARCH/agent). Nothing here is fetched but BASE, so an
# air-gapped builder with no registry builds both images on `scratch`.
#
# Build args:
#   BASE  the runtime base (default scratch). Any image works whose user
#         65532 may run a static binary, e.g.
#         gcr.io/distroless/static-debian12:nonroot where it can be pulled.
#   ARCH  the GOARCH the binaries were compiled for (default amd64).
#
# By hand: `make images` does this for you.
#   docker build --target hub   --build-arg BASE=scratch -t flotilla-hub:dev   _output/image
#   docker build --target agent --build-arg BASE=scratch -t flotilla-agent:dev _output/image
#
# No BuildKit-only syntax: the classic builder (a Docker engine without
# buildx) builds it as well as BuildKit does.

ARG BASE=scratch

FROM ${BASE} AS agent
ARG ARCH=amd64
LABEL org.opencontainers.image.source="https://github.com/flotilla-dev/flotilla" \
      org.opencontainers.image.title="flotilla-agent" \
      org.opencontainers.image.description="Flotilla's per-member agent"
COPY rootfs/ /
COPY ${ARCH}/agent /agent
USER 65532:65532
ENTRYPOINT ["/agent"]

FROM ${BASE} AS hub
ARG ARCH=amd64
LABEL org.opencontainers.image.source="https://github.com/flotilla-dev/flotilla" \
      org.opencontainers.image.title="flotilla-hub" \
      org.opencontainers.image.description="Flotilla's hub manager"
COPY rootfs/ /
COPY ${ARCH}/hub /hub
USER 65532:65532
ENTRYPOINT ["/hub"]
