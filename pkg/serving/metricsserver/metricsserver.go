// Package metricsserver serves a process's Prometheus metrics at /metrics
// the way controller-runtime's metrics server does for the hub (the same
// timeouts, the same self-signed certificate, HTTP/2 off), without
// linking controller-runtime: it is the agent's, whose binary must carry
// neither controller-runtime nor client-go's scheme of every API group
// (docs/architecture.md, "Executable size"). pkg/kclient's tests check
// that it links neither.
//
// Secure serving is HTTPS behind a filter, metricsauth's, that lets
// through only bearer tokens the apiserver authenticates and whose
// identity may get /metrics. Plain HTTP, open to anyone who reaches the
// port, is for the local testbed only.
package metricsserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	certutil "k8s.io/client-go/util/cert"
)

// Disabled is the address that serves nothing, as controller-runtime's
// --metrics-bind-address takes it.
const Disabled = "0"

// The server's limits, controller-runtime's (its internal httpserver): a
// client has 32 s to send a request's headers (and, on HTTPS, to complete
// the handshake), at most 1 MiB of them, and an idle keep-alive connection
// is closed after 90 s, the keep-alive timeout of Go's default transport.
// Shutdown waits for requests in flight up to a minute; their contexts end
// with Start's, so a review in progress gives up at once.
const (
	readHeaderTimeout = 32 * time.Second
	idleTimeout       = 90 * time.Second
	maxHeaderBytes    = 1 << 20
	shutdownTimeout   = time.Minute
)

// Options configure a Server.
type Options struct {
	// Addr is the address to listen on, host:port (port 0 picks a free
	// one: see Server.Addr); Disabled ("0") serves nothing.
	Addr string
	// Gatherer is the registry whose metrics /metrics serves.
	Gatherer prometheus.Gatherer
	// Secure serves HTTPS, with a self-signed certificate made in memory
	// at Start, behind Filter; false serves plain HTTP to anyone (the
	// local testbed).
	Secure bool
	// Filter wraps the /metrics handler when Secure (metricsauth's
	// NewFilter); it is required then, and refused on plain HTTP, where
	// the bearer tokens it reads would cross the network in the clear.
	Filter func(next http.Handler) http.Handler
	// DisableCompression answers uncompressed even to a scraper that
	// accepts gzip: an agent's /metrics is small, and the gzip writer
	// promhttp keeps between scrapes holds about 0.8 MB of heap
	// (docs/benchmarks.md, 2026-12-05 latest).
	DisableCompression bool
	// Log gets the server's start, stop and failures.
	Log logr.Logger
}

// Server serves /metrics. Start it once.
type Server struct {
	opts    Options
	handler http.Handler

	mu   sync.Mutex
	addr string
}

// New returns a Server of o; it listens when started.
func New(o Options) (*Server, error) {
	if o.Addr == Disabled {
		return &Server{opts: o}, nil
	}
	if o.Addr == "" {
		// Listening on "" would take a random port on every interface.
		return nil, errors.New(`metrics server: no address (host:port, or "0" to serve nothing)`)
	}
	if o.Gatherer == nil {
		return nil, errors.New("metrics server: no Gatherer to serve")
	}
	switch {
	case o.Secure && o.Filter == nil:
		return nil, errors.New("metrics server: secure serving needs a Filter that authenticates and authorizes scrapers")
	case !o.Secure && o.Filter != nil:
		return nil, errors.New("metrics server: a Filter on plain HTTP would have scrapers send their bearer tokens in the clear; serve securely")
	}
	var h http.Handler = promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{
		ErrorHandling:      promhttp.HTTPErrorOnError,
		DisableCompression: o.DisableCompression,
	})
	if o.Filter != nil {
		h = o.Filter(h)
	}
	mux := http.NewServeMux()
	// GET (and HEAD) /metrics only: anything else is answered 404 or 405
	// before any review is made.
	mux.Handle("GET /metrics", h)
	return &Server{opts: o, handler: mux}, nil
}

// Addr is the address the server listens on, the port chosen when Addr
// asked for port 0; empty until Start listens, and when disabled.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Start listens and serves until ctx ends, then shuts the server down
// gracefully (see shutdownTimeout) and returns nil; an error to listen or
// serve is returned at once. A disabled server waits for ctx and returns
// nil, so a caller runs it like any other.
func (s *Server) Start(ctx context.Context) error {
	if s.opts.Addr == Disabled {
		<-ctx.Done()
		return nil
	}
	l, err := s.listen(ctx)
	if err != nil {
		return fmt.Errorf("metrics server: %w", err)
	}
	s.mu.Lock()
	s.addr = l.Addr().String()
	s.mu.Unlock()

	// HTTP/1.1 only, on TLS (see tlsConfig) and on plain HTTP (no h2c).
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	srv := &http.Server{
		Handler:           s.handler,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		Protocols:         &protocols,
	}
	s.opts.Log.Info("serving metrics", "address", s.addr, "secure", s.opts.Secure)

	served, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
		case <-served:
			return
		}
		s.opts.Log.Info("shutting down the metrics server", "timeout", shutdownTimeout)
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			s.opts.Log.Error(err, "shutting down the metrics server")
		}
	}()
	err = srv.Serve(l)
	if !errors.Is(err, http.ErrServerClosed) {
		// Serve failed on its own (Shutdown makes it return
		// ErrServerClosed): close what is left and say why.
		close(served)
		<-stopped
		_ = srv.Close()
		return fmt.Errorf("metrics server: %w", err)
	}
	<-stopped
	return nil
}

// listen opens the server's listener: TCP, wrapped in TLS when secure.
func (s *Server) listen(ctx context.Context) (net.Listener, error) {
	var tlsConf *tls.Config
	if s.opts.Secure {
		var err error
		if tlsConf, err = tlsConfig(); err != nil {
			return nil, err
		}
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", s.opts.Addr)
	if err != nil {
		return nil, err
	}
	if tlsConf != nil {
		l = tls.NewListener(l, tlsConf)
	}
	return l, nil
}

// tlsConfig presents a self-signed certificate for localhost and
// 127.0.0.1, made in memory, as controller-runtime's metrics server does
// when it has no certificate on disk: what matters is that scrapes and
// their bearer tokens are encrypted, and scrapers of in-cluster metrics
// do not verify the server (kube-controller-manager serves its metrics
// the same way). ALPN offers HTTP/1.1 only, as serving.DisableHTTP2 does
// for the hub: HTTP/2's rapid-reset attack (CVE-2023-44487) lets one
// client tie up the server, and no scraper needs HTTP/2.
func tlsConfig() (*tls.Config, error) {
	cert, key, err := certutil.GenerateSelfSignedCertKeyWithFixtures("localhost", []net.IP{{127, 0, 0, 1}}, nil, "")
	if err != nil {
		return nil, fmt.Errorf("generating a self-signed certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("loading the self-signed certificate: %w", err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	}, nil
}
