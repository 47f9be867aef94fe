package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/pkg/pki"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	for _, args := range [][]string{
		{"-dir", dir, "ca"},
		{"-dir", dir, "hub", "-host", "hub.example,10.0.0.1"},
		{"-dir", dir, "agent", "east", "west"},
	} {
		if err := run(args, &out); err != nil {
			t.Fatalf("run(%q): %v", args, err)
		}
	}
	if _, err := pki.ServerTLSConfig(filepath.Join(dir, pki.HubCertFile), filepath.Join(dir, pki.HubKeyFile), filepath.Join(dir, pki.CACertFile)); err != nil {
		t.Errorf("hub files unusable: %v", err)
	}
	if _, err := pki.ClientTLSConfig(filepath.Join(dir, pki.AgentCertFile("west")), filepath.Join(dir, pki.AgentKeyFile("west")), filepath.Join(dir, pki.CACertFile), ""); err != nil {
		t.Errorf("agent files unusable: %v", err)
	}

	out.Reset()
	if err := run([]string{"-dir", dir, "agent", "east"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "kept") {
		t.Errorf("second run issued again: %s", out.String())
	}
	if err := run([]string{"-dir", dir, "agent", "Not_Valid"}, &out); err == nil {
		t.Error("an invalid cluster name was accepted")
	}
	if err := run([]string{"-dir", dir, "bogus"}, &out); err == nil {
		t.Error("an unknown command was accepted")
	}
}

// TestNoKeyMaterialInOutput runs every command, including a failing one
// whose key file does not belong to its certificate, and checks that
// nothing the command prints or returns holds a PEM block or a private
// key, and that it leaves its directory 0700 and its keys 0600.
func TestNoKeyMaterialInOutput(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	var out bytes.Buffer
	var errs []string
	for _, args := range [][]string{
		{"-dir", dir, "ca"},
		{"-dir", dir, "hub", "-host", "hub.example"},
		{"-dir", dir, "agent", "east", "west"},
		{"-dir", dir, "agent", "east"},
	} {
		if err := run(args, &out); err != nil {
			t.Fatalf("run(%q): %v", args, err)
		}
	}
	// A CA whose key is another's: loading it fails, and the error must
	// name the files, not quote them.
	other := filepath.Join(t.TempDir(), "other")
	if err := run([]string{"-dir", other, "ca"}, &out); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(other, pki.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, pki.CAKeyFile), key, 0o600); err != nil {
		t.Fatal(err)
	}
	err = run([]string{"-dir", dir, "agent", "north"}, &out)
	if err == nil {
		t.Fatal("a CA key that does not belong to ca.crt was accepted")
	}
	errs = append(errs, err.Error())
	all := out.String() + strings.Join(errs, "\n")
	if !strings.Contains(all, "issued") || !strings.Contains(all, pki.CAKeyFile) {
		t.Fatalf("the output does not look like flotilla-pki's (nothing captured?):\n%s", all)
	}
	for _, secret := range []string{"-----BEGIN", "PRIVATE KEY", string(key[30:60])} {
		if strings.Contains(all, secret) {
			t.Errorf("flotilla-pki's output holds %q:\n%s", secret, all)
		}
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: mode %o, want 0700", dir, fi.Mode().Perm())
	}
	for _, name := range []string{pki.CAKeyFile, pki.HubKeyFile, pki.AgentKeyFile("east"), pki.AgentKeyFile("west")} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %o, want 0600", name, fi.Mode().Perm())
		}
	}
}
