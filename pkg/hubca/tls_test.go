package hubca

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
)

// echoServer serves TLS on loopback with getCert, echoing each line back,
// until the test ends.
func echoServer(t *testing.T, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{MinVersion: tls.VersionTLS13, GetCertificate: getCert})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return lis.Addr().String()
}

// dialPinned connects the way a joining agent does: no roots, only the
// CA's hash, checked against the chain the server sends
// (bootstrap.VerifyPinned). It returns the connection and the leaf the
// server presented.
func dialPinned(addr, pin string) (*tls.Conn, *x509.Certificate, error) {
	var leaf *x509.Certificate
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		// VerifyPeerCertificate below is the verification: it trusts
		// the pinned CA only.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if _, err := bootstrap.VerifyPinned(raw, pin, "127.0.0.1"); err != nil {
				return err
			}
			c, err := x509.ParseCertificate(raw[0])
			leaf = c
			return err
		},
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, nil, err
	}
	return conn, leaf, nil
}

// echo sends msg over conn and checks it comes back.
func echo(conn net.Conn, msg string) error {
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(conn, msg); err != nil {
		return fmt.Errorf("writing: %w", err)
	}
	got, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading: %w", err)
	}
	if strings.TrimSpace(got) != msg {
		return fmt.Errorf("echoed %q, want %q", got, msg)
	}
	return nil
}

// TestRotationOverTLS serves a Rotator's certificates (4 s lifetime, real
// clock) over TLS on loopback. A client that knows only the CA's hash
// verifies the chain it is sent; a client pinned to another CA is refused
// naming both hashes, and that refusal disturbs no one; after a rotation
// a new handshake gets a new leaf while the connection made before it
// keeps working.
func TestRotationOverTLS(t *testing.T) {
	ca := newCA(t, 0)
	r, err := NewRotator(ca, RotatorOptions{Lifetime: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the rotator did not stop within 10s")
		}
	}()
	addr := echoServer(t, r.GetCertificate)
	pin := bootstrap.CAHash(ca.Cert)

	first, firstLeaf, err := dialPinned(addr, pin)
	if err != nil {
		t.Fatalf("a client pinned to the hub CA: %v", err)
	}
	defer first.Close()
	if err := echo(first, "before"); err != nil {
		t.Fatalf("the first connection: %v", err)
	}

	other := newCA(t, 0)
	if conn, _, err := dialPinned(addr, bootstrap.CAHash(other.Cert)); err == nil {
		conn.Close()
		t.Fatal("a client pinned to another CA completed the handshake")
	} else if !strings.Contains(err.Error(), bootstrap.CAHash(other.Cert)) || !strings.Contains(err.Error(), pin) {
		t.Errorf("a client pinned to another CA: %v, want an error naming the pinned hash and the hub's", err)
	}

	var newLeaf *x509.Certificate
	testutil.Eventually(t, "a new handshake seeing a new leaf after the rotation", 30*time.Second, func() error {
		conn, leaf, err := dialPinned(addr, pin)
		if err != nil {
			return err
		}
		defer conn.Close()
		if leaf.Equal(firstLeaf) {
			return errors.New("still the first leaf")
		}
		if err := echo(conn, "new"); err != nil {
			return err
		}
		newLeaf = leaf
		return nil
	}, testutil.Every(200*time.Millisecond))
	if newLeaf.SerialNumber.Cmp(firstLeaf.SerialNumber) == 0 {
		t.Error("the new leaf has the first one's serial number")
	}
	if err := echo(first, "after"); err != nil {
		t.Errorf("the connection made before the rotation: %v, want it to keep working", err)
	}
}
