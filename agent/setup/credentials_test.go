package setup

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/agent/join"
)

func TestAPIServerUnreachable(t *testing.T) {
	secrets := schema.GroupResource{Resource: "secrets"}
	get := func(err error) error {
		// As client-go and join.Load wrap them.
		return fmt.Errorf("reading Secret flotilla-system/x: %w", &url.Error{Op: "Get", URL: "https://10.96.0.1:443/api", Err: err})
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", get(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), true},
		{"connection reset", get(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), true},
		{"cut during the handshake", get(io.EOF), true},
		{"a certificate that does not verify", get(&tls.CertificateVerificationError{Err: x509.HostnameError{Certificate: &x509.Certificate{}, Host: "10.96.0.1"}}), true},
		{"503", apierrors.NewServiceUnavailable("starting"), true},
		{"429", apierrors.NewTooManyRequests("slow down", 1), true},
		{"500", apierrors.NewInternalError(errors.New("etcd")), true},
		{"504", apierrors.NewTimeoutError("slow", 1), true},
		{"401", apierrors.NewUnauthorized("who are you"), false},
		{"403", apierrors.NewForbidden(secrets, "x", errors.New("no")), false},
		{"404", apierrors.NewNotFound(secrets, "x"), false},
		{"our own deadline", get(context.DeadlineExceeded), false},
		{"cancelled", context.Canceled, false},
		{"a Secret that does not parse", errors.New("flotilla-agent-credentials: tls.crt: no certificate"), false},
	}
	for _, tt := range tests {
		if got := apiserverUnreachable(tt.err); got != tt.want {
			t.Errorf("%s (%v): apiserverUnreachable = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

// lateProxy forwards loopback TCP connections to target from an address
// that refuses connections (nothing listens there) until open is closed,
// as an in-cluster address does before kube-proxy translates it.
type lateProxy struct {
	addr     string
	accepted atomic.Int32
}

func startLateProxy(t *testing.T, target string, open <-chan struct{}) *lateProxy {
	t.Helper()
	// A free loopback port, closed again: connections to it are refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lateProxy{addr: ln.Addr().String()}
	_ = ln.Close()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-stop:
			return
		case <-open:
		}
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			t.Errorf("listening on %s, refused until now: %v", p.addr, err)
			return
		}
		go func() { <-stop; _ = ln.Close() }()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
				select {
				case <-done:
				case <-stop:
				}
			}()
		}
	}()
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
	})
	return p
}

// countingConfig is cfg through addr, counting the requests it sends.
func countingConfig(t *testing.T, cfg *rest.Config, addr string, requests *atomic.Int32) *rest.Config {
	t.Helper()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	c := rest.CopyConfig(cfg)
	c.Host = "https://" + addr
	// The apiserver's certificate names its own address.
	c.TLSClientConfig.ServerName = u.Hostname()
	c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			requests.Add(1)
			return rt.RoundTrip(r)
		})
	}
	return c
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestIdentityReadWaitsForTheAPIServer: the agent's first read of its
// Secrets (a controller-runtime client, as the agent builds it), against
// a real apiserver whose address refuses connections for its first
// second, is tried again until it gets through, and decides from what the
// apiserver holds; a refusal that is an answer (401) is returned at once;
// an address that never answers ends with ctx, naming the last error.
func TestIdentityReadWaitsForTheAPIServer(t *testing.T) {
	cfg := startEnv(t)
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	const ns = "identity-read"
	log := testr.New(t)

	t.Run("refused connections are tried again", func(t *testing.T) {
		open := make(chan struct{})
		p := startLateProxy(t, u.Host, open)
		var requests atomic.Int32
		c, err := client.New(countingConfig(t, cfg, p.addr, &requests), client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(time.Second, func() { close(open) })
		ctx, cancel := context.WithTimeout(context.Background(), identityReadTimeout)
		defer cancel()
		plan, err := loadPlan(ctx, log, c, ns, "", "")
		if err != nil {
			t.Fatalf("loadPlan through an address that refused for its first second: %v", err)
		}
		// Nothing in the namespace: the agent falls back to its files.
		if plan.Mode != join.UseFiles {
			t.Errorf("plan.Mode = %v (%s), want %v: no Secret exists", plan.Mode, plan.Why, join.UseFiles)
		}
		if n := p.accepted.Load(); n == 0 {
			t.Errorf("the proxy accepted no connection: the read did not go through it")
		}
		if n := requests.Load(); n < 3 {
			t.Errorf("%d requests sent, want at least 3 (refused at least once, then the two Secret reads)", n)
		}
	})

	t.Run("an answer is not tried again", func(t *testing.T) {
		var requests atomic.Int32
		bad := countingConfig(t, cfg, u.Host, &requests)
		bad.CertData, bad.KeyData, bad.CertFile, bad.KeyFile = nil, nil, "", ""
		bad.BearerToken = "not-a-token-this-apiserver-knows"
		c, err := client.New(bad, client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), identityReadTimeout)
		defer cancel()
		_, err = loadPlan(ctx, log, c, ns, "", "")
		if !apierrors.IsUnauthorized(err) || strings.Contains(err.Error(), "tried") {
			t.Fatalf("loadPlan with an unknown token: err = %v, want 401 Unauthorized at once", err)
		}
		if n := requests.Load(); n > 2 {
			t.Errorf("%d requests sent for a 401, want at most 2 (discovery, the read): an answer is not tried again", n)
		}
	})

	t.Run("an address that never answers ends with ctx", func(t *testing.T) {
		p := startLateProxy(t, u.Host, nil)
		var requests atomic.Int32
		c, err := client.New(countingConfig(t, cfg, p.addr, &requests), client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = loadPlan(ctx, log, c, ns, "", "")
		if err == nil || !strings.Contains(err.Error(), "tried") || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("loadPlan against a closed port: err = %v, want the refusal and the number of tries", err)
		}
		if n := requests.Load(); n < 2 {
			t.Errorf("%d requests sent in 2 s of refusals, want several", n)
		}
	})
}
