package serving

import (
	"crypto/tls"
	"net/http"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flotilla-dev/flotilla/pkg/kclient/direct"
	"github.com/flotilla-dev/flotilla/pkg/serving/metricsauth"
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

// MetricsOptions configure controller-runtime's /metrics server at addr
// ("0" disables it), the hub's. secure serves HTTPS (with a self-signed
// certificate generated in memory by controller-runtime) and lets through
// only requests whose bearer token the apiserver authenticates and whose
// identity may get /metrics (metricsauth); without it, /metrics is plain
// HTTP open to anyone who reaches the port, for the local testbed only.
// HTTP/2 is off either way.
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

// metricsAuth is the FilterProvider of MetricsOptions: metricsauth's
// filter, reviewing through a direct client of the apiserver config
// reaches. The handlers controller-runtime wraps (/metrics and any extra
// one) share its answers. httpClient is not used: the direct client builds
// its own from config, and client-go reuses the transport it already
// built for the same TLS settings.
func metricsAuth(config *rest.Config, _ *http.Client) (metricsserver.Filter, error) {
	c, err := direct.New(config, metricsauth.Scheme())
	if err != nil {
		return nil, err
	}
	rv := metricsauth.NewReviewer(c)
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return rv.Wrap(log, next), nil
	}, nil
}
