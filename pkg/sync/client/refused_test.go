package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/go-logr/logr/funcr"

	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// connectTo opens a sync stream to addr as runStream does (a fresh
// connection, no waiting for it to be ready) and returns the error.
func connectTo(t *testing.T, addr string) error {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := syncv1.NewSyncClient(conn).Connect(ctx)
	if err == nil {
		// Opening may succeed lazily; the first receive says how it went.
		_, err = stream.Recv()
	}
	if err == nil {
		t.Fatalf("a stream to %s worked; want it to fail", addr)
	}
	return err
}

// TestRefusedIsARealRefusedConnection checks the classifier on what gRPC
// really returns: a port nothing listens on is refused (also when wrapped,
// as runStream wraps a dial error); a peer that accepts the connection and
// closes it is not, nor is any other status.
func TestRefusedIsARealRefusedConnection(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	err = connectTo(t, closed)
	if !refused(err) {
		t.Errorf("refused(%v) = false for a port nothing listens on", err)
	}
	if wrapped := fmt.Errorf("connecting to %s: %w", closed, err); !refused(wrapped) {
		t.Errorf("refused(%v) = false when wrapped", wrapped)
	}

	l, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if err := connectTo(t, l.Addr().String()); refused(err) {
		t.Errorf("refused(%v) = true for a peer that accepted the connection", err)
	}
	for _, err := range []error{
		status.Error(codes.Unauthenticated, "connection refused"),
		errors.New("connection refused"),
		status.Error(codes.Unavailable, "hub is shutting down; reconnect later"),
	} {
		if refused(err) {
			t.Errorf("refused(%v) = true", err)
		}
	}
}

// TestRefusedAttemptsRetryAtTheInitialBackoff checks the waits between
// attempts: failures grow the wait up to MaxBackoff, while a refused
// attempt waits InitialBackoff (jittered) whatever came before, and does
// not grow the next wait.
func TestRefusedAttemptsRetryAtTheInitialBackoff(t *testing.T) {
	c := &Client{cfg: Config{InitialBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second}}
	other := status.Error(codes.Unavailable, "connection error: desc = \"transport: authentication handshake failed: EOF\"")
	refusal := fmt.Errorf("connecting: %w", status.Error(codes.Unavailable,
		"connection error: desc = \"transport: Error while dialing: dial tcp 10.0.0.1:30443: connect: connection refused\""))

	attempt := 0
	for range 8 {
		c.nextDelay(other, &attempt)
	}
	if d := c.nextDelay(other, &attempt); d < 2500*time.Millisecond {
		t.Fatalf("after 9 failures the wait is %s, want at least half of MaxBackoff", d)
	}
	before := attempt
	for range 20 {
		if d := c.nextDelay(refusal, &attempt); d < 50*time.Millisecond || d > 100*time.Millisecond {
			t.Fatalf("a refused attempt waits %s, want within [50ms, 100ms] (InitialBackoff jittered)", d)
		}
	}
	if attempt != before {
		t.Errorf("refused attempts counted as failures: attempt %d -> %d", before, attempt)
	}
}

// TestRefusedConnectionsAreLoggedSparingly checks the log while nothing
// listens: a refused attempt every half second must not be a line every
// half second. The first refusal of a run and every refusalLogEvery-th
// are logged at the default level, the others at V(1); any other end of a
// stream is logged and starts a new run.
func TestRefusedConnectionsAreLoggedSparingly(t *testing.T) {
	var lines []string
	c := &Client{log: funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 0})}
	refusal := status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp 10.0.0.1:30443: connect: connection refused\"")
	other := status.Error(codes.Unavailable, "hub is shutting down; reconnect later")

	refusals := 0
	for range 2*refusalLogEvery + 5 {
		c.logStreamEnd(refusal, false, time.Second, &refusals)
	}
	if len(lines) != 3 {
		t.Fatalf("%d refusals in a row logged %d lines at the default level, want 3 (the first, the %dth, the %dth):\n%s",
			2*refusalLogEvery+5, len(lines), refusalLogEvery, 2*refusalLogEvery, strings.Join(lines, "\n"))
	}
	if !strings.Contains(lines[2], fmt.Sprintf(`"refusals"=%d`, 2*refusalLogEvery)) {
		t.Errorf("the last line does not count the refusals: %s", lines[2])
	}
	c.logStreamEnd(other, false, time.Second, &refusals)
	c.logStreamEnd(refusal, false, time.Second, &refusals)
	if len(lines) != 5 || refusals != 1 {
		t.Errorf("another error and then a refusal logged %d lines (want 2 more) and left refusals at %d (want 1):\n%s", len(lines)-3, refusals, strings.Join(lines[3:], "\n"))
	}
}
