// Package envtestenv gives a test package one envtest apiserver (with etcd)
// from the repository's bin/, started on the first test that needs it, so a
// package's pure table tests run without it, and stopped when the package's
// tests end.
package envtestenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flotilla-dev/flotilla/test/testbed"
)

// Shared is one package's apiserver. The zero value is ready to use.
type Shared struct {
	once sync.Once
	env  *envtest.Environment
	cfg  *rest.Config
	err  error
}

// Config returns the apiserver's admin config, starting it on first use
// from KUBEBUILDER_ASSETS (default: the repository's bin/, which
// `make testbed-bin` fills).
func (s *Shared) Config(t testing.TB) *rest.Config {
	t.Helper()
	s.once.Do(func() {
		if os.Getenv("KUBEBUILDER_ASSETS") == "" {
			os.Setenv("KUBEBUILDER_ASSETS", testbed.DefaultBinDir())
		}
		dir := os.Getenv("KUBEBUILDER_ASSETS")
		for _, bin := range []string{"kube-apiserver", "etcd"} {
			if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
				s.err = fmt.Errorf("%s is missing from KUBEBUILDER_ASSETS=%s; run `make testbed-bin` in the repository root", bin, dir)
				return
			}
		}
		s.env = &envtest.Environment{}
		s.cfg, s.err = s.env.Start()
	})
	if s.err != nil {
		t.Fatalf("starting envtest: %v", s.err)
	}
	return s.cfg
}

// ConfigWithCRDs is Config with Flotilla's CRDs (CRDDir) installed and
// served.
func (s *Shared) ConfigWithCRDs(t testing.TB) *rest.Config {
	t.Helper()
	cfg := s.Config(t)
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{CRDDir()}, ErrorIfPathMissing: true}); err != nil {
		t.Fatalf("installing the CRDs: %v", err)
	}
	return cfg
}

// ManagerOptions are a test manager's options on scheme: no metrics or
// probe listener, and no check that controller names are unique (a
// package's tests start several managers in one process).
func ManagerOptions(scheme *k8sruntime.Scheme) ctrl.Options {
	skip := true
	return ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: &skip},
	}
}

// CRDDir is the repository's deploy/hub/crds, found from this file's own
// place in the source tree, so a test package at any depth installs the
// CRDs that `make manifests` generates.
func CRDDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return filepath.Join("deploy", "hub", "crds")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "hub", "crds")
}

// Main runs the package's tests and stops the apiserver, if it started,
// by its process; a failure to stop fails the run. Call it from TestMain.
func Main(m *testing.M, s *Shared) {
	code := m.Run()
	if s.env != nil {
		if err := s.env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}
