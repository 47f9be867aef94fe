package hubca

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/pki"
)

// TestFilesReload loads a directory flotilla-pki made and serves it over
// TLS: a client pinned to ca.crt's hash verifies the chain [hub.crt,
// ca.crt]. A new hub.crt and hub.key written into the directory are
// served from a later handshake on without a restart, while a broken
// hub.crt keeps the last good certificate served.
func TestFilesReload(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureHub(dir, ca, nil); err != nil {
		t.Fatal(err)
	}
	logs := &testutil.LogBuffer{}
	f, err := LoadFiles(dir, 20*time.Millisecond, logs.Logger())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Start(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Files.Start did not return within 10s of its context ending")
		}
	}()
	caPEM, err := os.ReadFile(filepath.Join(dir, pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.CABundle(), caPEM) {
		t.Error("CABundle is not ca.crt")
	}
	if !f.CANotAfter().Equal(ca.Cert.NotAfter) {
		t.Errorf("CANotAfter = %s, want %s", f.CANotAfter(), ca.Cert.NotAfter)
	}
	addr := echoServer(t, f.GetCertificate)
	pin := bootstrap.CAHash(ca.Cert)
	conn, first, err := dialPinned(addr, pin)
	if err != nil {
		t.Fatalf("a client pinned to ca.crt: %v", err)
	}
	defer conn.Close()
	if !f.NotAfter().Equal(first.NotAfter) {
		t.Errorf("NotAfter = %s, want the served leaf's %s", f.NotAfter(), first.NotAfter)
	}

	// Rotated on disk, as cert-manager or an admin would.
	next, err := ca.IssueHub(nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := next.WriteFiles(filepath.Join(dir, pki.HubCertFile), filepath.Join(dir, pki.HubKeyFile)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "a handshake serving the hub.crt written into the directory", 10*time.Second, func() error {
		c, leaf, err := dialPinned(addr, pin)
		if err != nil {
			return err
		}
		c.Close()
		if !leaf.Equal(next.Cert) {
			return errors.New("not the new hub.crt yet")
		}
		return nil
	})
	if err := echo(conn, "still here"); err != nil {
		t.Errorf("the connection made before the reload: %v", err)
	}

	// A hub.crt that does not parse keeps the last good one served.
	if err := os.WriteFile(filepath.Join(dir, pki.HubCertFile), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the broken hub.crt logged", 10*time.Second, func() error {
		if !strings.Contains(logs.String(), pki.HubCertFile) {
			return errors.New("nothing logged naming hub.crt")
		}
		return nil
	})
	if cert, _ := f.GetCertificate(&tls.ClientHelloInfo{}); !cert.Leaf.Equal(next.Cert) {
		t.Error("a broken hub.crt replaced the certificate served")
	}
	if strings.Contains(logs.String(), "PRIVATE KEY") {
		t.Error("the log holds key material")
	}
}

// TestLoadFilesRefusesBadDirectories checks that missing files, a key of
// another certificate and a ca.crt without certificates are refused at
// load, each naming the file.
func TestLoadFilesRefusesBadDirectories(t *testing.T) {
	good := t.TempDir()
	ca, err := pki.EnsureCA(good)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureHub(good, ca, nil); err != nil {
		t.Fatal(err)
	}
	other, err := ca.IssueHub(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := other.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	copyDir := func(mutate func(dir string)) string {
		dir := t.TempDir()
		for _, name := range []string{pki.CACertFile, pki.HubCertFile, pki.HubKeyFile} {
			b, err := os.ReadFile(filepath.Join(good, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		mutate(dir)
		return dir
	}
	for _, tt := range []struct {
		name   string
		mutate func(dir string)
		want   string
	}{
		{"no hub.key", func(d string) { os.Remove(filepath.Join(d, pki.HubKeyFile)) }, pki.HubKeyFile},
		{"no ca.crt", func(d string) { os.Remove(filepath.Join(d, pki.CACertFile)) }, pki.CACertFile},
		{"key of another certificate", func(d string) { os.WriteFile(filepath.Join(d, pki.HubKeyFile), otherKey, 0o600) }, "do not belong together"},
		{"ca.crt without certificates", func(d string) { os.WriteFile(filepath.Join(d, pki.CACertFile), []byte("x"), 0o600) }, pki.CACertFile},
	} {
		_, err := LoadFiles(copyDir(tt.mutate), 0, logr.Discard())
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want one naming %s", tt.name, err, tt.want)
		}
	}
	if _, err := LoadFiles(good, 0, logr.Discard()); err != nil {
		t.Errorf("the good directory: %v", err)
	}
}
