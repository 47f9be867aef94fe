package pki

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeyMaterialIsPrivate issues a CA, a hub and an agent certificate the
// way flotilla-pki and the testbed do, into a directory that does not
// exist yet and into one that exists with mode 0755, and checks that each
// directory ends up 0700 and each private key file 0600, while the
// certificates stay readable (0644), so the check can tell them apart.
func TestKeyMaterialIsPrivate(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	// Mkdir is subject to the umask; make the starting mode certain.
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(base, "new", "certs"), open} {
		ca, err := EnsureCA(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := EnsureHub(dir, ca, []string{"hub.example"}); err != nil {
			t.Fatal(err)
		}
		if _, err := EnsureAgent(dir, ca, "east"); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o700 {
			t.Errorf("%s: mode %o, want 0700", dir, got)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		keys := 0
		for _, e := range entries {
			fi, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			want := os.FileMode(0o644)
			if strings.HasSuffix(e.Name(), ".key") {
				want = 0o600
				keys++
			}
			if got := fi.Mode().Perm(); got != want {
				t.Errorf("%s: mode %o, want %o", filepath.Join(dir, e.Name()), got, want)
			}
		}
		if keys != 3 {
			t.Errorf("%s holds %d key files, want 3 (ca, hub, agent-east): %v", dir, keys, entries)
		}
	}
}

// TestEnsureKeyDirRefusesAFile checks that a key directory path naming a
// file is an error naming it, not a silent success.
func TestEnsureKeyDirRefusesAFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := EnsureKeyDir(f)
	if err == nil || !strings.Contains(err.Error(), f) {
		t.Fatalf("EnsureKeyDir(%s) = %v, want an error naming it", f, err)
	}
}
