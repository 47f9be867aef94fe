package testutil

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"
)

// LateAddr is a loopback address that refuses connections (nothing
// listens there) until Open, then forwards each to a target: an
// apiserver's address as a pod sees it before kube-proxy translates it.
type LateAddr struct {
	// Addr is host:port.
	Addr     string
	cfg      *rest.Config
	target   string
	open     chan struct{}
	once     sync.Once
	accepted atomic.Int32
}

// NewLateAddr reserves a free loopback port for the apiserver cfg
// reaches; the test's cleanup stops it and every connection it forwards.
func NewLateAddr(t testing.TB, cfg *rest.Config) *LateAddr {
	t.Helper()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &LateAddr{Addr: ln.Addr().String(), cfg: cfg, target: u.Host, open: make(chan struct{})}
	// Closed again: connections to it are refused until Open.
	_ = ln.Close()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-stop:
			return
		case <-a.open:
		}
		ln, err := net.Listen("tcp", a.Addr)
		if err != nil {
			t.Errorf("listening on %s, refused until now: %v", a.Addr, err)
			return
		}
		go func() { <-stop; _ = ln.Close() }()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a.accepted.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				up, err := net.Dial("tcp", a.target)
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
	return a
}

// Open starts listening and forwarding; calling it again does nothing.
func (a *LateAddr) Open() { a.once.Do(func() { close(a.open) }) }

// Accepted is how many connections it accepted since Open.
func (a *LateAddr) Accepted() int { return int(a.accepted.Load()) }

// Config is the apiserver's config dialling a instead, verifying the
// apiserver's certificate for its own host, and counting in requests
// every request it sends.
func (a *LateAddr) Config(requests *atomic.Int32) *rest.Config {
	c := rest.CopyConfig(a.cfg)
	c.Host = "https://" + a.Addr
	c.TLSClientConfig.ServerName, _, _ = net.SplitHostPort(a.target)
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
