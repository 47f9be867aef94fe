// Package serving holds the options of the HTTPS servers the hub and the
// agent run: the /metrics endpoint of both and the hub's admission
// webhook. Both binaries need the same hardening, and hub and agent code
// share nothing outside pkg/, so it lives here.
//
// /metrics is served over HTTPS and every request is authenticated with a
// TokenReview and authorized with a SubjectAccessReview against the
// cluster's apiserver (metricsauth, answering 401 / 403 as
// kube-apiserver does): a scraper needs a bearer
// token of an identity allowed to get the non-resource URL /metrics, which
// deploy's flotilla-metrics-reader ClusterRole grants. Plain HTTP is kept
// for the local testbed only (--metrics-secure=false). The hub serves it
// through controller-runtime's metrics server (MetricsOptions); the agent,
// which links neither controller-runtime nor client-go's typed clients,
// through metricsserver. Both create the reviews with a direct client
// (pkg/kclient/direct).
//
// HTTP/2 is off on both servers: its rapid-reset attack (CVE-2023-44487)
// lets one client tie up the server, and neither the apiserver calling the
// webhook nor a metrics scraper needs HTTP/2. The webhook also requires
// TLS 1.3, which every supported kube-apiserver speaks.
package serving
