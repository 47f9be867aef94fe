package serving

import (
	"crypto/tls"

	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// DisableHTTP2 offers only HTTP/1.1 in ALPN, so a client cannot speak
// HTTP/2 to the server (CVE-2023-44487, rapid reset). controller-runtime
// offers "h2" by default.
func DisableHTTP2(c *tls.Config) {
	c.NextProtos = []string{"http/1.1"}
}

// RequireTLS13 refuses handshakes below TLS 1.3.
func RequireTLS13(c *tls.Config) {
	c.MinVersion = tls.VersionTLS13
}

// WebhookTLSOpts are the admission webhook server's TLS options: TLS 1.3
// at least and no HTTP/2.
func WebhookTLSOpts() []func(*tls.Config) {
	return []func(*tls.Config){RequireTLS13, DisableHTTP2}
}

// MetricsOptions configure the /metrics server at addr ("0" disables it).
// secure serves HTTPS (with a self-signed certificate generated in memory
// by controller-runtime) and lets through only requests whose bearer token
// the apiserver authenticates and whose identity may get /metrics; without
// it, /metrics is plain HTTP open to anyone who reaches the port, for the
// local testbed only. HTTP/2 is off either way.
func MetricsOptions(addr string, secure bool) metricsserver.Options {
	opts := metricsserver.Options{
		BindAddress: addr,
		TLSOpts:     []func(*tls.Config){DisableHTTP2},
	}
	if secure {
		opts.SecureServing = true
		opts.FilterProvider = metricsAuth
	}
	return opts
}
