# Flotilla's build. `make help` lists the targets.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

ROOT      := $(shell pwd)
BIN       := $(ROOT)/bin
TESTBED   := $(ROOT)/.testbed
MEMBERS   ?= 3
GO        ?= go
# Build tags of the hub and agent executables (and of test/fleet's and
# hack/build-images.sh's builds): grpcnotrace leaves out gRPC's
# golang.org/x/net/trace, whose html/template would keep every exported
# method of every type linked (docs/architecture.md, "Executable size").
GO_TAGS   ?= grpcnotrace
export GO_TAGS
# Each fuzz target runs this many inputs in `make test`. A count, not a
# duration: with a duration, Go 1.26's fuzz coordinator can report
# "context deadline exceeded" as a failure when the deadline fires while a
# worker is mid-input on a loaded machine (golang/go#75804, fixed in Go
# 1.27); a count has no deadline to race. `make fuzz FUZZTIME=5m` still
# runs a longer, timed search.
FUZZTIME  ?= 20000x
# envtest and the testbed use the binaries built into bin/.
export KUBEBUILDER_ASSETS := $(BIN)
export FLOTILLA_BIN := $(BIN)

CONTROLLER_GEN := $(GO) tool controller-gen

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: ## Generate deepcopy code and protobuf / gRPC code.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	@if [ -x hack/generate-proto.sh ]; then hack/generate-proto.sh; fi

.PHONY: manifests
manifests: ## Generate CRDs and RBAC into deploy/ (the kustomize bases and the Helm charts), the metrics reference docs/metrics.md, and the alerts and dashboard in deploy/monitoring.
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=deploy/hub/crds
	$(GO) run ./hack/crdtrim deploy/hub/crds/flotilla.dev_myapps.yaml spec.template.spec
	$(CONTROLLER_GEN) rbac:roleName=flotilla-hub paths=./hub/... output:rbac:artifacts:config=deploy/hub/rbac
	$(CONTROLLER_GEN) rbac:roleName=flotilla-agent paths=./agent/... output:rbac:artifacts:config=deploy/agent/rbac
	@# The Helm charts install the same generated files: the CRDs from the
	@# chart's crds/, the RBAC rules through .Files.Get (templates/rbac.yaml).
	rm -rf deploy/charts/flotilla-hub/crds && mkdir -p deploy/charts/flotilla-hub/crds deploy/charts/flotilla-hub/files deploy/charts/flotilla-agent/files
	cp deploy/hub/crds/*.yaml deploy/charts/flotilla-hub/crds/
	cp deploy/hub/rbac/role.yaml deploy/charts/flotilla-hub/files/role.yaml
	cp deploy/agent/rbac/role.yaml deploy/charts/flotilla-agent/files/role.yaml
	$(GO) run ./hack/metricsdoc -out docs/metrics.md
	$(GO) run ./hack/monitoring -dir deploy/monitoring

.PHONY: verify
verify: generate manifests ## Fail when generated code or manifests are out of date, or go.mod is not tidy.
	@if [ -n "$$(git status --porcelain -- api deploy pkg hack docs/metrics.md)" ]; then \
		echo "generated files are out of date; run 'make generate manifests' and commit:"; \
		git status --porcelain -- api deploy pkg hack docs/metrics.md; git --no-pager diff --stat; exit 1; fi
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod / go.sum are not tidy; run 'go mod tidy' and commit:"; $(GO) mod tidy -diff; exit 1; }
	@echo "generated code and manifests are up to date, go.mod tidy"

.PHONY: lint
lint: ## gofmt and go vet.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

##@ Build

.PHONY: images
images: ## Build the hub and agent images with a Docker engine, no registry needed (BASE=scratch; IMAGE_TAG, IMAGE_REPO, ARCH: hack/build-images.sh).
	hack/build-images.sh

.PHONY: build
build: ## Build every package and the commands into bin/.
	$(GO) build ./...
	$(GO) build -tags $(GO_TAGS) -o $(BIN)/ ./hub ./agent ./cmd/...

.PHONY: testbed-bin
testbed-bin: ## Build the testbed's control-plane binaries into bin/ (skips those present).
	hack/build-testbed-bin.sh

.PHONY: prometheus-bin
prometheus-bin: testbed-bin ## Build Prometheus and promtool into bin/ for the health-shift tests, the alert tests and bench (skipped when present).
	hack/build-testbed-bin.sh prometheus

.PHONY: helm-bin
helm-bin: testbed-bin ## Build helm into bin/ for the chart tests (skipped when present).
	hack/build-testbed-bin.sh helm

##@ Test

# The packages `make test` runs with the race detector: those whose own
# code starts goroutines or shares state through channels, sync or
# sync/atomic (grep -E 'go func|chan |sync\.|atomic\.' outside _test.go
# finds them), and test/integration, which runs the hub and agents in one
# process and so is the only test of the hub's reconcile goroutines and of
# syncbridge talking to the sync server and client. The other packages are
# plain data and pure functions; they run without -race, which keeps
# make test from building the whole tree twice. Add a package here when it
# starts a goroutine.
RACE_PKGS := ./agent/... ./hub/internal/controllers/... ./hub/internal/push ./hub/setup ./hub/internal/syncbridge \
	./pkg/apply ./pkg/kclient/... ./pkg/leader/... ./pkg/works ./pkg/serving/... ./pkg/hubca ./pkg/sync/... ./test/fleet ./test/testbed/... ./test/integration ./test/scale

.PHONY: test
test: lint prometheus-bin helm-bin ## Lint; unit, integration and testbed tests (RACE_PKGS with -race); a short fuzz run; the e2e suite.
	@# One package at a time: the packages that start control planes pick
	@# free loopback ports, and two of them starting at once could race for
	@# one; it also keeps their timing off each other's cores. Each package
	@# runs once: RACE_PKGS in test-race, the others here.
	@race=$$($(GO) list $(RACE_PKGS)); plain=$$($(GO) list ./... | grep -vxF "$$race"); \
		echo "$(GO) test -count=1 -p 1 -timeout 45m <every package not in RACE_PKGS>"; \
		$(GO) test -count=1 -p 1 -timeout 45m $$plain
	$(MAKE) test-race
	$(MAKE) fuzz
	$(MAKE) e2e

.PHONY: test-race
test-race: prometheus-bin ## Run the tests of RACE_PKGS with the race detector (pkg/apply's twice: through controller-runtime's client and through pkg/kclient/direct).
	$(GO) test -race -count=1 -p 1 -timeout 45m $(RACE_PKGS)
	FLOTILLA_KCLIENT=direct $(GO) test -race -count=1 -timeout 10m ./pkg/apply

.PHONY: fuzz
# The targets are found in the test sources (a "func Fuzz..." line), not by
# `go test -list` per package, which linked a test binary for each of the
# module's packages (minutes on a cold machine) to find a dozen targets.
# The directories skipped are those `go list ./...` skips.
fuzz: ## Run every fuzz target for FUZZTIME (default 20000 inputs each).
	@dirs=$$(find . \( -name '.?*' -o -name '_*' -o -name testdata -o -name bin \) -prune -o -name '*_test.go' -print \
		| xargs grep -l '^func Fuzz' | xargs -n1 dirname | sort -u); \
	[ -n "$$dirs" ] || { echo "no fuzz target found"; exit 1; }; \
	for dir in $$dirs; do \
		for t in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go | sed 's/^func //'); do \
			echo "fuzz $$dir $$t ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$dir > /tmp/flotilla-fuzz.log 2>&1 || { cat /tmp/flotilla-fuzz.log; exit 1; }; \
		done; \
	done

# E2E_PROVIDER=kind runs the suite against kind clusters made by
# test/e2e-multikind/kind/up.sh (see its README); the default is the testbed.
E2E_PROVIDER ?= testbed
E2E_FLAGS ?=
# E2E_SPECS picks the specs: all; testbed (only those a kind run does not
# cover); kind-covered (the others), so that a machine running both fleets
# runs each spec once. The sets are in test/e2e-multikind/specsets.go.
E2E_SPECS ?= all
# E2E_PARALLEL is go test's -parallel for the suite: how many of the specs
# that disturb no other (independent, test/e2e-multikind/e2e_test.go) run
# at once, after the others; 1 runs every spec one after another. make
# e2e-kind's default is 4 (hack/kind/e2e-kind.sh), E2E_PARALLEL=N sets it.
E2E_PARALLEL ?= 8

.PHONY: e2e
e2e: prometheus-bin ## Run the e2e suite (test/e2e-multikind) against the local testbed.
	$(GO) test -tags e2e -count=1 -timeout 40m -parallel $(E2E_PARALLEL) ./test/e2e-multikind/ -provider=$(E2E_PROVIDER) -specs=$(E2E_SPECS) $(E2E_FLAGS)

.PHONY: kind-bin
kind-bin: testbed-bin ## Build kind, kubelet, kubeadm, kube-proxy, containerd, ctr, crictl, CoreDNS and pause into bin/ for the kind node image (skipped when present).
	hack/build-testbed-bin.sh kind
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/pause ./hack/kind/pause

.PHONY: kind-image
kind-image: kind-bin ## Build the offline kind node image from Debian packages and bin/ (root and Docker; skipped when its content hash is built).
	hack/kind/build-node-image.sh

.PHONY: e2e-kind
e2e-kind: kind-image helm-bin ## Run the e2e suite on kind: hub + 3 member clusters from the offline node image, Flotilla installed by its charts; everything torn down after.
	hack/kind/e2e-kind.sh

# Runs per figure of the end-to-end latency report (at least 30).
BENCH_RUNS ?= 30
BENCH_FAILOVER_RUNS ?= 30
BENCH_ZERO_RUNS ?= 30
BENCH_SHIFT_RUNS ?= 20

# The recorded end-to-end run `make bench` compares its figures with (a
# -json record of test/bench); copy _output/bench.json over it to record a
# new one.
BENCH_RECORD ?= docs/bench/record.json

.PHONY: bench
bench: prometheus-bin ## Benchmarks: scheduler and sync fan-out (go test -bench), the end-to-end latency report on the testbed, then the reduced scale run (make scale) compared with its record.
	$(GO) test -run '^$$' -bench BenchmarkSchedule -benchtime 300ms -benchmem ./pkg/placement/
	$(GO) test -run '^$$' -bench BenchmarkFanout -benchtime 5x -benchmem ./pkg/sync/
	$(GO) run ./test/bench -runs $(BENCH_RUNS) -failover-runs $(BENCH_FAILOVER_RUNS) -zero-runs $(BENCH_ZERO_RUNS) -shift-runs $(BENCH_SHIFT_RUNS) -out _output/bench.md \
		-json _output/bench.json $(if $(wildcard $(BENCH_RECORD)),-compare $(BENCH_RECORD))
	$(GO) run ./test/bench/rollout -runs 5 -min-success 2s
	$(MAKE) scale SIZE=reduced

# The scale harness's preset: reduced (200 members, 2,000 MyApps, scenarios
# 1, 2 and 4; about 6 minutes) or full (1,000 members, 10,000 MyApps, all
# six). SCALE_FLAGS passes more flags (go run ./test/scale -h lists them).
SIZE ?= reduced
SCALE_FLAGS ?=
SCALE_RECORD = docs/scale/$(SIZE).json

.PHONY: scale
scale: testbed-bin build ## Scale harness: the real hub, SIZE=reduced|full simulated members and MyApps; figures in _output/scale-SIZE.*, compared with docs/scale/SIZE.json.
	@mkdir -p _output
	$(GO) run ./test/scale -size $(SIZE) -out _output/scale-$(SIZE).md -json _output/scale-$(SIZE).json -plot _output/scale-$(SIZE).png \
		$(if $(wildcard $(SCALE_RECORD)),-compare $(SCALE_RECORD)) $(SCALE_FLAGS)

##@ Testbed

# The MyApp(s) `make run` applies once Flotilla runs.
EXAMPLE ?= examples/divided-static-weights.yaml

.PHONY: run
run: testbed-bin build ## Run Flotilla locally: hub + MEMBERS members, the hub and agents, EXAMPLE applied, a live table; Ctrl-C stops it.
	$(BIN)/testbed run --dir $(TESTBED) --members $(MEMBERS) --bin $(BIN) --flotilla --apply $(EXAMPLE) --watch

.PHONY: testbed-up
testbed-up: testbed-bin build ## Start the testbed in the background (FLOTILLA=1 also runs the hub and agents).
	$(BIN)/testbed up --dir $(TESTBED) --members $(MEMBERS) --bin $(BIN) $(if $(FLOTILLA),--flotilla)

.PHONY: testbed-down
testbed-down: ## Stop a background testbed.
	$(GO) build -o $(BIN)/testbed ./cmd/testbed
	$(BIN)/testbed down --dir $(TESTBED)
