// Package helmchart tests the Helm charts deploy/charts/flotilla-hub and
// deploy/charts/flotilla-agent with the real helm binary (bin/helm, `make
// helm-bin`): lint, template golden files, values the schema refuses, and
// an install into real kube-apiservers whose objects are compared with the
// kustomize bases'.
package helmchart

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/flotilla-dev/flotilla/test/testbed"
)

// Charts.
const (
	HubChart   = "flotilla-hub"
	AgentChart = "flotilla-agent"
)

// Namespace is where the tests install both charts, the kustomize bases'.
const Namespace = "flotilla-system"

// ChartDir is deploy/charts/<chart>, found from this file's place in the
// source tree.
func ChartDir(chart string) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return filepath.Join("deploy", "charts", chart)
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "charts", chart)
}

// Helm runs bin/helm with its own config, cache and data folders (never the
// user's) under dir.
type Helm struct {
	Bin string
	Env []string
}

// NewHelm finds bin/helm ($FLOTILLA_BIN or the repository's bin/) and
// fails the test when it is missing.
func NewHelm(t testing.TB) *Helm {
	t.Helper()
	bin := filepath.Join(testbed.DefaultBinDir(), "helm")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("helm is missing (%v); run `make helm-bin` in the repository root", err)
	}
	home := t.TempDir()
	return &Helm{Bin: bin, Env: []string{
		"HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data"),
	}}
}

// Run runs helm with args and returns its stdout; a failure carries
// stderr.
func (h *Helm) Run(args ...string) (string, error) {
	cmd := exec.Command(h.Bin, args...)
	cmd.Env = append(os.Environ(), h.Env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), &Error{Args: args, Err: err, Stderr: errb.String()}
	}
	return out.String(), nil
}

// Error is a failed helm run; Stderr is helm's own message.
type Error struct {
	Args   []string
	Err    error
	Stderr string
}

func (e *Error) Error() string { return fmt.Sprintf("helm %v: %v\n%s", e.Args, e.Err, e.Stderr) }
