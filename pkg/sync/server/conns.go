package server

import (
	"container/list"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/credentials"
)

// connGuard bounds the connections that have not proved an agent
// certificate yet: those in the TLS handshake, and those that finished it
// without a certificate the interceptors accept (a probe, a scanner, a
// peer with a foreign or revoked certificate, which may make RPCs only to
// hear why they are refused). Such a connection is pending from Accept
// until one of its RPCs authenticates (Server.authenticate), and:
//
//   - it is closed when it is still pending timeout after Accept, so a
//     peer that opens a TCP connection and says nothing, or holds a TLS
//     connection without a certificate, goes away on its own;
//   - when max connections are pending and one more arrives, the oldest
//     pending one is closed to make room. Accept is never held up: a
//     flood of strangers costs each of them its slot after a while, but
//     an agent's handshake and first RPC, which take milliseconds, still
//     get through. Evicting the newest instead would let a flood that
//     fills the table once lock every agent out until it ages.
//
// Memory and goroutines for strangers are therefore bounded by max, and
// authenticated agents are not counted at all.
type connGuard struct {
	max     int
	timeout time.Duration
	log     logr.Logger

	mu      sync.Mutex
	pending list.List // of *guardedConn, oldest first
	evicted uint64
	expired uint64
	// lastLog rate-limits the eviction log line, which a flood would
	// otherwise repeat for every connection.
	lastLog time.Time
}

func newConnGuard(max int, timeout time.Duration, log logr.Logger) *connGuard {
	return &connGuard{max: max, timeout: timeout, log: log}
}

// track registers c as pending, evicting the oldest pending connection
// when the table is full.
func (g *connGuard) track(c net.Conn) *guardedConn {
	gc := &guardedConn{Conn: c, guard: g}
	var evict *guardedConn
	g.mu.Lock()
	if g.pending.Len() >= g.max {
		evict = g.pending.Remove(g.pending.Front()).(*guardedConn)
		evict.elem = nil
		g.evicted++
	}
	gc.elem = g.pending.PushBack(gc)
	gc.timer = time.AfterFunc(g.timeout, gc.expire)
	logNow := evict != nil && time.Since(g.lastLog) > time.Minute
	if logNow {
		g.lastLog = time.Now()
	}
	evicted := g.evicted
	g.mu.Unlock()
	if evict != nil {
		evict.timer.Stop()
		_ = evict.Conn.Close()
		if logNow {
			g.log.Info("too many connections without an agent certificate; closing the oldest to make room (logged at most once a minute)",
				"maxPending", g.max, "evictedTotal", evicted, "closed", evict.RemoteAddr().String())
		}
	}
	return gc
}

// counts returns how many connections are pending now, and how many were
// evicted and timed out since the server started.
func (g *connGuard) counts() (pending int, evicted, expired uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pending.Len(), g.evicted, g.expired
}

// guardedListener tracks every connection it accepts in its guard.
type guardedListener struct {
	net.Listener
	guard *connGuard
}

func (l *guardedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.guard.track(c), nil
}

// guardedConn is one accepted connection; elem is its place in the
// guard's pending list, nil once it authenticated or was closed (guarded
// by guard.mu).
type guardedConn struct {
	net.Conn
	guard *connGuard
	elem  *list.Element
	timer *time.Timer
}

// release takes c off the pending list; it reports whether c was on it.
func (c *guardedConn) release() bool {
	c.guard.mu.Lock()
	defer c.guard.mu.Unlock()
	if c.elem == nil {
		return false
	}
	c.guard.pending.Remove(c.elem)
	c.elem = nil
	return true
}

// authenticated says an RPC on c proved an agent certificate: c no longer
// counts against the cap and is not closed for being pending.
func (c *guardedConn) authenticated() {
	if c.release() {
		c.timer.Stop()
	}
}

// expire closes c if it is still pending when its time is up.
func (c *guardedConn) expire() {
	c.guard.mu.Lock()
	pending := c.elem != nil
	if pending {
		c.guard.pending.Remove(c.elem)
		c.elem = nil
		c.guard.expired++
	}
	c.guard.mu.Unlock()
	if pending {
		_ = c.Conn.Close()
	}
}

func (c *guardedConn) Close() error {
	c.release()
	c.timer.Stop()
	return c.Conn.Close()
}

// guardCreds is the server's TLS credentials, with the connection handed
// on in the AuthInfo, so that the interceptors can tell the guard when a
// connection authenticated.
type guardCreds struct {
	credentials.TransportCredentials
}

func (g guardCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, ai, err := g.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	ti, ok := ai.(credentials.TLSInfo)
	if !ok {
		return conn, ai, nil
	}
	gc, _ := raw.(*guardedConn) // nil when served on an unguarded listener
	return conn, connAuthInfo{TLSInfo: ti, conn: gc}, nil
}

func (g guardCreds) Clone() credentials.TransportCredentials {
	return guardCreds{TransportCredentials: g.TransportCredentials.Clone()}
}

// connAuthInfo is the TLS AuthInfo of a guarded connection.
type connAuthInfo struct {
	credentials.TLSInfo
	conn *guardedConn
}
