package myapp

import (
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

// One apiserver serves the package's envtest tests; it starts on the first
// test that needs it, so the table tests run without it.
var sharedEnv envtestenv.Shared

func TestMain(m *testing.M) { envtestenv.Main(m, &sharedEnv) }

// startEnv returns the config of the package's envtest apiserver, with
// Flotilla's CRDs installed.
func startEnv(t *testing.T) *rest.Config {
	t.Helper()
	cfg := sharedEnv.Config(t)
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{envtestenv.CRDDir()}, ErrorIfPathMissing: true}); err != nil {
		t.Fatalf("installing the CRDs: %v", err)
	}
	return cfg
}
