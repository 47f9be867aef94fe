# syntax=docker/dockerfile:1
#
# Flotilla's two images from one Dockerfile; pick one with --target:
#
#   docker build --target hub   -t ghcr.io/flotilla-dev/flotilla-hub:dev   .
#   docker build --target agent -t ghcr.io/flotilla-dev/flotilla-agent:dev .
#
# Without --target the last stage, the hub, is built. BuildKit builds only
# the stages the target needs, so each image compiles one binary. Build args:
#   GO_VERSION  the golang builder image tag (default 1.26, as go.mod asks)
#   VERSION     the agent's version as it reports it to the hub (default dev)
# Cross-building (docker buildx build --platform linux/arm64,...) compiles
# natively on the build machine for each TARGETARCH; no emulation needed.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS source
WORKDIR /src
# Dependencies first, so a source change doesn't download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .

FROM source AS build-hub
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/hub ./hub

FROM source AS build-agent
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath \
      -ldflags="-s -w -X github.com/flotilla-dev/flotilla/agent/setup.Version=${VERSION}" \
      -o /out/agent ./agent

# distroless static, nonroot (uid/gid 65532): no shell, no package manager;
# the binaries are static (CGO_ENABLED=0) and need only CA certificates and
# tzdata, which the image has.
FROM gcr.io/distroless/static-debian12:nonroot AS agent
LABEL org.opencontainers.image.source="https://github.com/flotilla-dev/flotilla" \
      org.opencontainers.image.title="flotilla-agent" \
      org.opencontainers.image.description="Flotilla's per-member agent"
COPY --from=build-agent /out/agent /agent
USER 65532:65532
ENTRYPOINT ["/agent"]

FROM gcr.io/distroless/static-debian12:nonroot AS hub
LABEL org.opencontainers.image.source="https://github.com/flotilla-dev/flotilla" \
      org.opencontainers.image.title="flotilla-hub" \
      org.opencontainers.image.description="Flotilla's hub manager"
COPY --from=build-hub /out/hub /hub
USER 65532:65532
ENTRYPOINT ["/hub"]
