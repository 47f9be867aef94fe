#!/usr/bin/env bash
# Builds the real control-plane binaries the testbed and envtest use into
# $BIN (default ./bin). Each binary is skipped when it is already present, so
# a warm machine pays nothing; a cold one pays about 16 minutes on 2 cores.
# One go build at a time: two big builds on 2 cores are slower than in a row.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/bin}
mkdir -p "$bin"

K8S_VERSION=v1.37.2
build_date=2026-01-01T00:00:00Z

# Stamp versions so the servers do not report v0.0.0-master and kubectl
# version works. Fixed build date keeps rebuilds byte-identical.
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${pkg}.gitVersion=${K8S_VERSION}"
  ldflags+=" -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=37"
  ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${build_date}"
  ldflags+=" -X ${pkg}.gitCommit=0000000000000000000000000000000000000000"
done

need() { for b in "$@"; do [ -x "$bin/$b" ] || return 0; done; return 1; }

# Static binaries (no cgo): the same builds serve the testbed on the host and
# the kind node image (make kind-image), whose control-plane images hold
# nothing but the binary.
export CGO_ENABLED=0

if need kube-apiserver kube-controller-manager kube-scheduler kubectl; then
  echo "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl ${K8S_VERSION} (cold: ~14 min)"
  (cd "$root/hack/tools/k8s" && go build -trimpath -ldflags "$ldflags" -o "$bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl)
fi
if need etcd; then
  echo "building etcd"
  (cd "$root/hack/tools/etcd" && go build -trimpath -o "$bin/etcd" go.etcd.io/etcd/server/v3)
fi
if need kwok; then
  echo "building kwok"
  (cd "$root/hack/tools/kwok" && go build -trimpath -o "$bin/kwok" sigs.k8s.io/kwok/cmd/kwok)
fi
# Prometheus (and promtool) only when asked ($1 = prometheus): the tests and the bench
# run one per member for the health shift; make run needs none.
# Both without Prometheus's service discovery plugins (the build tag
# remove_all_sd keeps file and HTTP discovery; static targets always work):
# the testbed's Prometheus scrapes static targets, and the plugins (AWS,
# Azure, GCE, Kubernetes, OpenStack, ...) were most of a cold build.
prom_tags=remove_all_sd
if [ "${1:-}" = prometheus ] && need prometheus; then
  echo "building prometheus"
  (cd "$root/hack/tools/prometheus" && go build -trimpath -tags "$prom_tags" -o "$bin/prometheus" github.com/prometheus/prometheus/cmd/prometheus)
fi
# promtool with it: the alert rules' unit tests (hack/monitoring) run
# `promtool check rules` and `promtool test rules`.
if [ "${1:-}" = prometheus ] && need promtool; then
  echo "building promtool"
  (cd "$root/hack/tools/prometheus" && go build -trimpath -tags "$prom_tags" -o "$bin/promtool" github.com/prometheus/prometheus/cmd/promtool)
fi
# helm only when asked ($1 = helm): the chart tests (test/helmchart) run it.
if [ "${1:-}" = helm ] && need helm; then
  echo "building helm (cold: ~5 min, 8 min of CPU)"
  (cd "$root/hack/tools/helm" && go build -trimpath \
    -ldflags "-X helm.sh/helm/v4/internal/version.version=v4.3.2" \
    -o "$bin/helm" helm.sh/helm/v4/cmd/helm)
fi
# The kind node image's parts only when asked ($1 = kind): make kind-image
# and make e2e-kind need them; make test and make run do not. kubelet,
# kubeadm and kube-proxy come from the same module and flags as the
# testbed's control plane above, so a warm cache pays only their own packages.
if [ "${1:-}" = kind ]; then
  if need kubelet kubeadm kube-proxy; then
    echo "building kubelet, kubeadm, kube-proxy ${K8S_VERSION} (after the testbed's binaries: ~4 min)"
    (cd "$root/hack/tools/k8s" && go build -trimpath -ldflags "$ldflags" -o "$bin/" \
      k8s.io/kubernetes/cmd/kubelet \
      k8s.io/kubernetes/cmd/kubeadm \
      k8s.io/kubernetes/cmd/kube-proxy)
  fi
  if need containerd containerd-shim-runc-v2 ctr crictl; then
    echo "building containerd, containerd-shim-runc-v2, ctr, crictl (cold: ~4 min)"
    (cd "$root/hack/tools/containerd" && go build -trimpath \
      -tags "no_aufs no_zfs no_btrfs no_devmapper" \
      -ldflags "-X github.com/containerd/containerd/v2/version.Version=v2.4.2 -X sigs.k8s.io/cri-tools/pkg/version.Version=v1.37.0" \
      -o "$bin/" \
      github.com/containerd/containerd/v2/cmd/containerd \
      github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
      github.com/containerd/containerd/v2/cmd/ctr \
      sigs.k8s.io/cri-tools/cmd/crictl)
  fi
  if need coredns; then
    echo "building coredns (cold: ~4 min)"
    (cd "$root/hack/tools/coredns" && go build -trimpath -o "$bin/coredns" github.com/coredns/coredns)
  fi
  if need kind; then
    echo "building kind"
    (cd "$root/hack/tools/kind" && go build -trimpath -o "$bin/kind" sigs.k8s.io/kind)
  fi
fi
echo "testbed binaries present in $bin"
