package server

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// pipeConn returns one end of an in-memory connection and a function
// that reports whether that end was closed (a read on the other end sees
// EOF or a closed pipe).
func pipeConn(t *testing.T) (net.Conn, func() bool) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, func() bool {
		_ = b.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err := b.Read(make([]byte, 1))
		return errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe)
	}
}

// TestConnGuardEvictsOldest fills the pending table and checks that one
// more connection closes the oldest pending one, that an authenticated
// connection neither counts nor is evicted, and that closing releases a
// slot.
func TestConnGuardEvictsOldest(t *testing.T) {
	g := newConnGuard(2, time.Hour, logr.Discard())
	c1, closed1 := pipeConn(t)
	c2, closed2 := pipeConn(t)
	c3, closed3 := pipeConn(t)
	c4, closed4 := pipeConn(t)
	g1, g2 := g.track(c1), g.track(c2)
	if p, ev, _ := g.counts(); p != 2 || ev != 0 {
		t.Fatalf("pending %d evicted %d, want 2 and 0", p, ev)
	}
	g3 := g.track(c3)
	if p, ev, _ := g.counts(); p != 2 || ev != 1 {
		t.Fatalf("pending %d evicted %d, want 2 and 1", p, ev)
	}
	if !closed1() || closed2() || closed3() {
		t.Fatalf("closed: c1 %v c2 %v c3 %v; want only the oldest, c1", closed1(), closed2(), closed3())
	}
	// An authenticated connection leaves the table and is never evicted.
	g2.authenticated()
	g.track(c4)
	if p, ev, _ := g.counts(); p != 2 || ev != 1 {
		t.Fatalf("pending %d evicted %d, want 2 (c3, c4) and still 1", p, ev)
	}
	if closed2() || closed4() {
		t.Fatal("an authenticated or new connection was closed")
	}
	if err := g3.Close(); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := g.counts(); p != 1 {
		t.Fatalf("pending %d after a close, want 1", p)
	}
	_ = g1.Close() // Closing an evicted connection again is harmless.
	if p, _, _ := g.counts(); p != 1 {
		t.Fatalf("pending %d after closing an evicted connection, want 1", p)
	}
}

// TestConnGuardExpiresPending checks that a connection still pending at
// the timeout is closed, and an authenticated one is not.
func TestConnGuardExpiresPending(t *testing.T) {
	g := newConnGuard(10, 50*time.Millisecond, logr.Discard())
	c1, closed1 := pipeConn(t)
	c2, closed2 := pipeConn(t)
	g.track(c1)
	g.track(c2).authenticated()
	deadline := time.Now().Add(10 * time.Second)
	for !closed1() {
		if time.Now().After(deadline) {
			t.Fatal("the pending connection was not closed within 10s of its 50ms timeout")
		}
	}
	if closed2() {
		t.Error("the authenticated connection was closed")
	}
	if p, _, ex := g.counts(); p != 0 || ex != 1 {
		t.Errorf("pending %d expired %d, want 0 and 1", p, ex)
	}
}

// TestConnConfigValidated checks that bad connection settings are refused
// with an error naming the field, and zero values get the defaults.
func TestConnConfigValidated(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
		want string // "" means valid
	}{
		{name: "zero values", cfg: Config{}},
		{name: "all set", cfg: Config{MaxStreamsPerConnection: 2, MaxConnectionIdle: time.Minute, MaxConnectionAge: time.Hour, MaxConnectionAgeGrace: time.Minute, HandshakeTimeout: time.Second, MaxPendingConnections: 10}},
		{name: "negative streams", cfg: Config{MaxStreamsPerConnection: -1}, want: "MaxStreamsPerConnection"},
		{name: "negative pending", cfg: Config{MaxPendingConnections: -1}, want: "MaxPendingConnections"},
		{name: "negative idle", cfg: Config{MaxConnectionIdle: -time.Second}, want: "MaxConnectionIdle"},
		{name: "negative age", cfg: Config{MaxConnectionAge: -time.Second}, want: "MaxConnectionAge"},
		{name: "negative handshake", cfg: Config{HandshakeTimeout: -time.Second}, want: "HandshakeTimeout"},
		{name: "grace too short", cfg: Config{MaxConnectionAgeGrace: time.Millisecond}, want: "MaxConnectionAgeGrace"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Works, cfg.Clusters, cfg.TLS = nopWorks{}, nopClusters{}, tlsWithCAs()
			err := cfg.defaults()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("err = %v, want none", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), "Config."+tt.want)):
				t.Fatalf("err = %v, want one naming Config.%s", err, tt.want)
			}
			if tt.want == "" && (cfg.MaxStreamsPerConnection == 0 || cfg.MaxConnectionIdle == 0 || cfg.MaxConnectionAge == 0 ||
				cfg.MaxConnectionAgeGrace == 0 || cfg.HandshakeTimeout == 0 || cfg.MaxPendingConnections == 0) {
				t.Errorf("a zero value is left after the defaults: %+v", cfg)
			}
		})
	}
}
