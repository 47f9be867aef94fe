// Package testbed runs real Kubernetes control planes as local processes on
// loopback: one hub cluster and N member clusters, each with its own etcd,
// kube-apiserver, kube-controller-manager and, for members, kube-scheduler
// and kwok with fake nodes, so Deployments really become Ready without a
// container runtime. It is the embedded default for `make run`, the
// integration tests and e2e, on machines without Docker.
//
// On request it also runs a real Prometheus (StartPrometheus) scraping an
// in-process exporter whose gauges a test sets (StartExporter), for code
// that queries a cluster's Prometheus. The kwok stages (stages.yaml) fake
// two broken images: one containing flotilla-fail never becomes Ready,
// one containing flotilla-crashloop crash-loops.
//
// The binaries come from bin/ (built by hack/build-testbed-bin.sh). Every
// process is started by this package and stopped by it, by PID: children
// also get SIGKILL from the kernel if the process that started them dies
// (Pdeathsig), so a crashed test leaves nothing running.
package testbed
