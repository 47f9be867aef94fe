package main

import (
	"bytes"
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
