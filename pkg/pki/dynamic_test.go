package pki

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestDynamicClientTLSConfig handshakes with a configuration whose
// certificate and roots are asked for at every handshake: a swapped
// certificate is presented from the next handshake on, and a server the
// roots of the moment do not vouch for (another CA, none yet, another
// name) is refused by the client.
func TestDynamicClientTLSConfig(t *testing.T) {
	ca, err := NewCA("test-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	hub, err := ca.IssueHub(nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	first, err := ca.IssueAgent("west", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	second, err := ca.IssueAgent("west", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{hub.TLSCertificate()}, ClientAuth: tls.RequestClientCert,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	serials := make(chan string, 8)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if err := tc.Handshake(); err == nil && len(tc.ConnectionState().PeerCertificates) > 0 {
				serials <- tc.ConnectionState().PeerCertificates[0].SerialNumber.String()
			} else {
				serials <- ""
			}
			c.Close()
		}
	}()

	var cur atomic.Pointer[KeyPair]
	cur.Store(first)
	var roots atomic.Pointer[x509.CertPool]
	pool := func(c *KeyPair) *x509.CertPool {
		p := x509.NewCertPool()
		p.AddCert(c.Cert)
		return p
	}
	roots.Store(pool(ca))
	cfg := DynamicClientTLSConfig(func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		c := cur.Load().TLSCertificate()
		return &c, nil
	}, roots.Load, "localhost")
	dial := func(cfg *tls.Config) (string, error) {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", lis.Addr().String(), cfg)
		if err != nil {
			// The server still accepted a connection; drain its report.
			select {
			case <-serials:
			case <-time.After(10 * time.Second):
			}
			return "", err
		}
		defer conn.Close()
		select {
		case s := <-serials:
			return s, nil
		case <-time.After(10 * time.Second):
			t.Fatal("the server did not report within 10s")
			return "", nil
		}
	}

	if got, err := dial(cfg); err != nil || got != first.Cert.SerialNumber.String() {
		t.Fatalf("first handshake presented %q, %v; want the first certificate", got, err)
	}
	cur.Store(second)
	if got, err := dial(cfg); err != nil || got != second.Cert.SerialNumber.String() {
		t.Fatalf("after the swap the handshake presented %q, %v; want the second certificate", got, err)
	}
	roots.Store(pool(other))
	if _, err := dial(cfg); err == nil || !strings.Contains(err.Error(), "not trusted") {
		t.Errorf("a hub of another CA: %v, want refused as not trusted", err)
	}
	roots.Store(nil)
	if _, err := dial(cfg); err == nil || !strings.Contains(err.Error(), "no hub CA") {
		t.Errorf("no roots yet: %v, want refused", err)
	}
	roots.Store(pool(ca))
	byIP := DynamicClientTLSConfig(cfg.GetClientCertificate, roots.Load, "127.0.0.1")
	if _, err := dial(byIP); err != nil {
		t.Errorf("a hub verified by its IP address SAN: %v", err)
	}
	wrongName := DynamicClientTLSConfig(cfg.GetClientCertificate, roots.Load, "hub.elsewhere.example")
	if _, err := dial(wrongName); err == nil || !strings.Contains(err.Error(), "hub.elsewhere.example") {
		t.Errorf("a hub certificate without the server name: %v, want refused naming it", err)
	}
}
