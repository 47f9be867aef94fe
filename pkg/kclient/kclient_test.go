package kclient_test

import (
	"os/exec"
	"strings"
	"testing"
)

// linksNothingOf lists the packages pkg linked, with their dependencies,
// and fails on any of banned.
func linksNothingOf(t *testing.T, pkg string, banned ...string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps %s listed %d packages: %q", pkg, len(deps), deps)
	}
	for _, d := range deps {
		for _, b := range banned {
			if d == b {
				t.Errorf("%s links %s", pkg, b)
			}
		}
	}
}

// TestApplierLinksNoTypedScheme: pkg/apply, which the agent and the hub's
// Push mode apply Works with, writes through kclient, and kclient/direct
// is the client an agent without controller-runtime will pass, so that
// none of them links
// controller-runtime's client or client-go's scheme of every API group
// (nor the typed clients and event recorder that bring it). This is what
// an agent without controller-runtime needs of them; the test fails when
// an import brings one back. The list grows as the agent's parts move off
// controller-runtime (docs/architecture.md, "Executable size").
func TestApplierLinksNoTypedScheme(t *testing.T) {
	for _, pkg := range []string{
		"github.com/flotilla-dev/flotilla/pkg/apply",
		"github.com/flotilla-dev/flotilla/pkg/kclient",
		"github.com/flotilla-dev/flotilla/pkg/kclient/direct",
		"github.com/flotilla-dev/flotilla/pkg/kclient/informer",
		"github.com/flotilla-dev/flotilla/pkg/works",
		"github.com/flotilla-dev/flotilla/agent/join",
		// The agent's other parts already on kclient or raw REST.
		"github.com/flotilla-dev/flotilla/agent/capacity",
		"github.com/flotilla-dev/flotilla/pkg/health",
		"github.com/flotilla-dev/flotilla/pkg/memberprobe",
		"github.com/flotilla-dev/flotilla/pkg/sync/client",
		// Its /metrics server and filter (pkg/serving/metricsserver's
		// tests also refuse anything of controller-runtime).
		"github.com/flotilla-dev/flotilla/pkg/serving/metricsauth",
		"github.com/flotilla-dev/flotilla/pkg/serving/metricsserver",
		// Its leader election (pkg/leader checks a longer list itself).
		"github.com/flotilla-dev/flotilla/pkg/leader",
	} {
		linksNothingOf(t, pkg,
			"sigs.k8s.io/controller-runtime/pkg/client",
			"k8s.io/client-go/kubernetes/scheme",
			"k8s.io/client-go/kubernetes",
			"k8s.io/client-go/tools/events",
		)
	}
}

// TestAgentLinksNoControllerRuntime: the agent's executable links, of
// controller-runtime, only the packages that carry no client, cache or
// scheme (logging, the probe handler, the kubeconfig loader, the signal
// handler), and of k8s.io/api only the groups of its own scheme; nothing
// of client-go's typed clients or leader election. A new import that
// brings back what made the agent large fails here, naming it
// (docs/architecture.md, "Executable size").
func TestAgentLinksNoControllerRuntime(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/flotilla-dev/flotilla/agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	allowed := map[string]bool{
		"sigs.k8s.io/controller-runtime/pkg/log":             true,
		"sigs.k8s.io/controller-runtime/pkg/internal/log":    true,
		"sigs.k8s.io/controller-runtime/pkg/log/zap":         true,
		"sigs.k8s.io/controller-runtime/pkg/healthz":         true,
		"sigs.k8s.io/controller-runtime/pkg/client/config":   true,
		"sigs.k8s.io/controller-runtime/pkg/manager/signals": true,
		"k8s.io/api/core/v1":                                 true,
		"k8s.io/api/apps/v1":                                 true,
		"k8s.io/api/discovery/v1":                            true,
		"k8s.io/api/coordination/v1":                         true,
		"k8s.io/api/authentication/v1":                       true,
		"k8s.io/api/authorization/v1":                        true,
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), deps)
	}
	for _, d := range deps {
		switch {
		case allowed[d]:
		case strings.HasPrefix(d, "sigs.k8s.io/controller-runtime"), strings.HasPrefix(d, "k8s.io/api/"),
			strings.HasPrefix(d, "k8s.io/client-go/kubernetes"), strings.HasPrefix(d, "k8s.io/client-go/tools/leaderelection"),
			strings.HasPrefix(d, "k8s.io/client-go/tools/record"), strings.HasPrefix(d, "k8s.io/client-go/tools/events"),
			strings.HasPrefix(d, "k8s.io/apiserver"):
			t.Errorf("the agent links %s", d)
		}
	}
}
