package metricsserver_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/kclient/direct"
	"github.com/flotilla-dev/flotilla/pkg/serving/internal/scrapetest"
	"github.com/flotilla-dev/flotilla/pkg/serving/metricsauth"
	"github.com/flotilla-dev/flotilla/pkg/serving/metricsserver"
	"github.com/flotilla-dev/flotilla/test/deployrbac"
	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

var sharedEnv envtestenv.Shared

func TestMain(m *testing.M) { envtestenv.Main(m, &sharedEnv) }

// metricName is the one metric the tests' registries hold.
const metricName = "flotilla_metricsserver_test_total"

// registry is a registry of one counter, metricName, with enough series
// that promhttp would compress them when asked.
func registry(t *testing.T) *prometheus.Registry {
	t.Helper()
	r := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricName, Help: "A counter of the test."}, []string{"n"})
	r.MustRegister(c)
	for i := range 50 {
		c.WithLabelValues(fmt.Sprint(i)).Inc()
	}
	return r
}

// start starts a Server of o on a free loopback port and returns its
// address once it listens; the server is stopped, and must have returned
// nil, when the test ends.
func start(t *testing.T, o metricsserver.Options) string {
	t.Helper()
	o.Addr = "127.0.0.1:0"
	if o.Gatherer == nil {
		o.Gatherer = registry(t)
	}
	s, err := metricsserver.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start returned %v after its context ended, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the server did not stop within 10 s of its context ending")
		}
	})
	var addr string
	testutil.Eventually(t, "the metrics server listening", 10*time.Second, func() error {
		select {
		case err := <-done:
			return fmt.Errorf("Start returned early: %v", err)
		default:
		}
		if addr = s.Addr(); addr == "" {
			return errors.New("no address yet")
		}
		return nil
	})
	return addr
}

// get fetches url/metrics with Accept-Encoding acceptEncoding ("" lets
// the transport choose) through client and returns the answer and its
// body as sent.
func get(t *testing.T, client *http.Client, url, acceptEncoding string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s/metrics: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// insecureTLS trusts any certificate: the server's is self-signed, and
// what is under test is who it lets in, not who it is.
func insecureTLS(protos ...string) *tls.Config {
	return &tls.Config{InsecureSkipVerify: true, NextProtos: protos} //nolint:gosec // See above.
}

// The agent's secure /metrics, end to end against a real apiserver:
// HTTPS with a self-signed certificate for localhost and 127.0.0.1,
// metricsauth's filter on a direct client (200 to the reader, 403 to an
// identity without the grant, 401 to a made-up token and to none),
// uncompressed when asked even to a scraper that accepts gzip, and no
// plain HTTP.
func TestSecureServesReviewedScrapers(t *testing.T) {
	admin := sharedEnv.Config(t)
	s := scrapetest.New(t, admin)
	c, err := direct.New(admin, metricsauth.Scheme())
	if err != nil {
		t.Fatal(err)
	}
	addr := start(t, metricsserver.Options{
		Secure: true, Filter: metricsauth.NewFilter(c, logr.Discard()), DisableCompression: true,
	})
	ctx := context.Background()
	for _, tt := range []struct {
		who, token string
		want       int
	}{
		{"the reader", s.Reader, http.StatusOK},
		{"an identity without the grant", s.Nobody, http.StatusForbidden},
		{"a made-up token", "not-a-token", http.StatusUnauthorized},
		{"no token", "", http.StatusUnauthorized},
	} {
		code, body, err := deployrbac.GetMetrics(ctx, addr, tt.token)
		if err != nil {
			t.Fatalf("%s: %v", tt.who, err)
		}
		if code != tt.want || (code == http.StatusOK) != strings.Contains(body, metricName) {
			t.Errorf("%s: %d %.200q, want %d (the metrics with 200 only)", tt.who, code, body, tt.want)
		}
	}
	code, encoding, body, err := deployrbac.GetMetricsEncoded(ctx, addr, s.Reader, "gzip")
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusOK || encoding != "" || !strings.Contains(body, metricName) {
		t.Errorf("asked for gzip with compression off: %d, Content-Encoding %q, body %.100q; want 200, none, the metrics as text", code, encoding, body)
	}

	conn, err := tls.Dial("tcp", addr, insecureTLS())
	if err != nil {
		t.Fatal(err)
	}
	leaf := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if !slices.Contains(leaf.DNSNames, "localhost") || !slices.ContainsFunc(leaf.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.IPv4(127, 0, 0, 1)) }) {
		t.Errorf("the certificate names %q and %v, want localhost and 127.0.0.1", leaf.DNSNames, leaf.IPAddresses)
	}

	plain := &http.Client{Timeout: 5 * time.Second}
	if resp, err := plain.Get("http://" + addr + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("the secure server answered 200 over plain HTTP")
		}
	}
}

// HTTPS offers HTTP/1.1 alone in ALPN: a client offering h2 first gets
// HTTP/1.1, one offering only h2 is refused at the handshake, and Go's
// client, which prefers HTTP/2, speaks HTTP/1.1.
func TestSecureRefusesHTTP2(t *testing.T) {
	addr := start(t, metricsserver.Options{
		Secure: true,
		// A filter that lets everyone in: the protocol is under test.
		Filter: func(next http.Handler) http.Handler { return next },
	})
	conn, err := tls.Dial("tcp", addr, insecureTLS("h2", "http/1.1"))
	if err != nil {
		t.Fatal(err)
	}
	if p := conn.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		t.Errorf("a client offering h2 and http/1.1 negotiated %q, want http/1.1", p)
	}
	conn.Close()

	if conn, err := tls.Dial("tcp", addr, insecureTLS("h2")); err == nil {
		p := conn.ConnectionState().NegotiatedProtocol
		conn.Close()
		t.Errorf("a client offering only h2 completed the handshake (negotiated %q), want it refused", p)
	}

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: insecureTLS(), ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	resp, body := get(t, client, "https://"+addr, "")
	if resp.StatusCode != http.StatusOK || resp.Proto != "HTTP/1.1" || !strings.Contains(body, metricName) {
		t.Errorf("Go's client preferring HTTP/2: %d over %s, want 200 over HTTP/1.1 with the metrics", resp.StatusCode, resp.Proto)
	}
}

// Insecure serving is plain HTTP/1.1 open to anyone, without h2c, and no
// TLS; /metrics is the only thing it serves, to GET.
func TestInsecureServesPlainHTTP(t *testing.T) {
	addr := start(t, metricsserver.Options{})
	client := &http.Client{Timeout: 5 * time.Second}
	resp, body := get(t, client, "http://"+addr, "")
	if resp.StatusCode != http.StatusOK || resp.Proto != "HTTP/1.1" || !strings.Contains(body, metricName) {
		t.Errorf("plain GET /metrics without a token: %d over %s, %.100q; want 200 over HTTP/1.1 with the metrics", resp.StatusCode, resp.Proto, body)
	}

	// A client speaking HTTP/2 in the clear from the start (h2c with
	// prior knowledge) is not understood.
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	h2cClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Protocols: &h2c}}
	defer h2cClient.CloseIdleConnections()
	if resp, err := h2cClient.Get("http://" + addr + "/metrics"); err == nil {
		resp.Body.Close()
		t.Errorf("a client speaking h2c got %d over %s, want no answer", resp.StatusCode, resp.Proto)
	}

	if conn, err := tls.Dial("tcp", addr, insecureTLS()); err == nil {
		conn.Close()
		t.Error("the insecure server completed a TLS handshake")
	}
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{http.MethodPost, "/metrics", http.StatusMethodNotAllowed},
		{http.MethodGet, "/metrics/x", http.StatusNotFound},
		{http.MethodGet, "/", http.StatusNotFound},
	} {
		req, err := http.NewRequest(tt.method, "http://"+addr+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s %s: %d, want %d", tt.method, tt.path, resp.StatusCode, tt.want)
		}
	}
}

// A scraper that accepts gzip gets it unless compression is off.
func TestCompression(t *testing.T) {
	client := &http.Client{Timeout: 5 * time.Second}
	for _, off := range []bool{false, true} {
		addr := start(t, metricsserver.Options{DisableCompression: off})
		resp, body := get(t, client, "http://"+addr, "gzip")
		encoding := resp.Header.Get("Content-Encoding")
		switch {
		case resp.StatusCode != http.StatusOK:
			t.Errorf("compression off %v: status %d", off, resp.StatusCode)
		case off && (encoding != "" || !strings.Contains(body, metricName)):
			t.Errorf("compression off, asked for gzip: Content-Encoding %q, body %.100q; want none and the metrics as text", encoding, body)
		case !off && encoding != "gzip":
			t.Errorf("compression on, asked for gzip: Content-Encoding %q, want gzip", encoding)
		}
	}
}

// Start serves until its context ends, then stops listening and returns
// nil; a disabled server ("0") listens nowhere and returns when its
// context ends; an address in use is Start's error.
func TestStartAndStop(t *testing.T) {
	s, err := metricsserver.New(metricsserver.Options{Addr: "127.0.0.1:0", Gatherer: registry(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	testutil.Eventually(t, "the metrics server listening", 10*time.Second, func() error {
		if s.Addr() == "" {
			return errors.New("no address yet")
		}
		return nil
	})
	addr := s.Addr()

	// Another server on the same address fails to start.
	busy, err := metricsserver.New(metricsserver.Options{Addr: addr, Gatherer: registry(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := busy.Start(ctx); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("a second server on %s: %v, want address already in use", addr, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start returned %v after its context ended, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return within 10 s of its context ending")
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after Start returned", addr)
	}

	off, err := metricsserver.New(metricsserver.Options{Addr: metricsserver.Disabled})
	if err != nil {
		t.Fatal(err)
	}
	octx, ocancel := context.WithCancel(context.Background())
	odone := make(chan error, 1)
	go func() { odone <- off.Start(octx) }()
	select {
	case err := <-odone:
		t.Fatalf("a disabled server's Start returned before its context ended: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	ocancel()
	select {
	case err := <-odone:
		if err != nil || off.Addr() != "" {
			t.Errorf("a disabled server: Start %v, Addr %q; want nil and none", err, off.Addr())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a disabled server's Start did not return within 10 s of its context ending")
	}
}

// New refuses what would not be what the caller meant: secure serving
// without a filter (anyone would get the metrics), a filter on plain
// HTTP (tokens in the clear), nothing to serve, and no address (a random
// port on every interface).
func TestNewRefusesUnsafeOptions(t *testing.T) {
	pass := func(next http.Handler) http.Handler { return next }
	r := prometheus.NewRegistry()
	for name, o := range map[string]metricsserver.Options{
		"secure without a filter": {Addr: ":0", Gatherer: r, Secure: true},
		"a filter on plain HTTP":  {Addr: ":0", Gatherer: r, Filter: pass},
		"no gatherer":             {Addr: ":0"},
		"no address":              {Gatherer: r},
	} {
		if _, err := metricsserver.New(o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// Neither package the agent serves /metrics with links controller-runtime,
// client-go's typed clients and scheme of every API group, or
// k8s.io/apiserver (whose delegating authenticator metricsauth replaces):
// pkg/kclient's TestApplierLinksNoTypedScheme checks the first two by
// exact package; this checks every package under those paths.
func TestLinksNoControllerRuntimeNorTypedClients(t *testing.T) {
	for _, pkg := range []string{
		"github.com/flotilla-dev/flotilla/pkg/serving/metricsauth",
		"github.com/flotilla-dev/flotilla/pkg/serving/metricsserver",
	} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, pkg) || !slices.Contains(deps, "k8s.io/client-go/util/cert") && !slices.Contains(deps, "k8s.io/client-go/util/retry") {
			t.Fatalf("go list -deps %s listed %d packages, not the ones it imports: %q", pkg, len(deps), deps)
		}
		for _, d := range deps {
			for _, banned := range []string{"sigs.k8s.io/controller-runtime", "k8s.io/client-go/kubernetes", "k8s.io/apiserver"} {
				if d == banned || strings.HasPrefix(d, banned+"/") {
					t.Errorf("%s links %s", pkg, d)
				}
			}
		}
	}
}
