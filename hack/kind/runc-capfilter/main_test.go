package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestSpecFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		want   string
		bundle bool
	}{
		{"create with --bundle", []string{"--root", "/run/r", "--log", "/l", "create", "--bundle", "/b", "id"}, "/b/config.json", true},
		{"create with --bundle=", []string{"create", "--bundle=/b", "id"}, "/b/config.json", true},
		{"create with -b", []string{"--log-format", "json", "create", "-b", "/b", "id"}, "/b/config.json", true},
		{"run in the working directory", []string{"run", "id"}, "config.json", true},
		{"exec --process", []string{"--root", "/run/r", "exec", "--process", "/tmp/p.json", "--detach", "id"}, "/tmp/p.json", false},
		{"exec -p", []string{"exec", "-p", "/tmp/p.json", "id"}, "/tmp/p.json", false},
		{"exec without a process file", []string{"exec", "id", "sh"}, "", false},
		{"start starts no new process spec", []string{"start", "id"}, "", false},
		{"delete", []string{"--root", "/run/r", "delete", "--force", "id"}, "", false},
		// A global option's value that looks like a command is not the command.
		{"global value named like a command", []string{"--log", "create", "state", "id"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, bundle := specFile(tc.args)
			if got != tc.want || bundle != tc.bundle {
				t.Fatalf("specFile(%q) = %q, %v; want %q, %v", tc.args, got, bundle, tc.want, tc.bundle)
			}
		})
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestFilterBundleDropsOnlyMissingAndKeepsUnknownFields(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	all := []any{"CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_SYS_ADMIN", "CAP_FUTURE_THING"}
	writeJSON(t, path, map[string]any{
		"ociVersion": "1.2.0",
		"hostname":   "node",
		"process": map[string]any{
			"args": []any{"/sbin/init"},
			"capabilities": map[string]any{
				"bounding": all, "effective": all, "permitted": all,
			},
		},
		"annotations": map[string]any{"x": "y"},
	})
	if err := filter(path, true, map[string]bool{"CAP_SYS_RESOURCE": true}); err != nil {
		t.Fatal(err)
	}
	doc := readJSON(t, path)
	want := []any{"CAP_CHOWN", "CAP_SYS_ADMIN", "CAP_FUTURE_THING"}
	caps := doc["process"].(map[string]any)["capabilities"].(map[string]any)
	for _, set := range []string{"bounding", "effective", "permitted"} {
		if !reflect.DeepEqual(caps[set], want) {
			t.Errorf("capabilities.%s = %v, want %v", set, caps[set], want)
		}
	}
	if doc["hostname"] != "node" || doc["ociVersion"] != "1.2.0" ||
		!reflect.DeepEqual(doc["annotations"], map[string]any{"x": "y"}) ||
		!reflect.DeepEqual(doc["process"].(map[string]any)["args"], []any{"/sbin/init"}) {
		t.Errorf("fields the filter does not know were changed: %v", doc)
	}
}

func TestFilterProcessFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "process.json")
	writeJSON(t, path, map[string]any{
		"args":         []any{"sh"},
		"capabilities": map[string]any{"bounding": []any{"CAP_SYS_RESOURCE", "CAP_KILL"}},
	})
	if err := filter(path, false, map[string]bool{"CAP_SYS_RESOURCE": true}); err != nil {
		t.Fatal(err)
	}
	doc := readJSON(t, path)
	got := doc["capabilities"].(map[string]any)["bounding"]
	if !reflect.DeepEqual(got, []any{"CAP_KILL"}) {
		t.Fatalf("bounding = %v, want [CAP_KILL]", got)
	}
}

func TestFilterLeavesGrantableSpecsByteForByte(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	// Indented on purpose: a rewrite would compact it.
	orig := []byte("{\n  \"process\": {\n    \"capabilities\": {\"bounding\": [\"CAP_KILL\"]}\n  }\n}\n")
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := filter(path, true, map[string]bool{"CAP_SYS_RESOURCE": true}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(orig) {
		t.Fatalf("spec with only grantable capabilities was rewritten:\n%s", got)
	}
}

func TestFilterNamesTheFileOnBadJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := filter(path, true, map[string]bool{})
	if err == nil {
		t.Fatal("filter accepted a spec that is not JSON")
	}
	if got := err.Error(); len(got) < len(path) || got[:len(path)] != path {
		t.Fatalf("error %q does not name the file %s", got, path)
	}
}

func TestMissingReadsThisProcesssBoundingSet(t *testing.T) {
	lacks, err := missing()
	if err != nil {
		t.Fatal(err)
	}
	// Whatever this host withholds, every name reported must be one the
	// program knows, and CAP_CHOWN (bit 0) is held by any process that can
	// run a container at all; under an unprivileged test runner it may be
	// missing, so only the names are checked there.
	known := map[string]bool{}
	for _, n := range capNames {
		known[n] = true
	}
	for n := range lacks {
		if !known[n] {
			t.Errorf("missing() reported unknown capability %q", n)
		}
	}
	if os.Geteuid() == 0 && lacks["CAP_CHOWN"] {
		t.Errorf("root lacks CAP_CHOWN in its bounding set? lacks=%v", lacks)
	}
}
