package works

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// One apiserver serves the package's tests; it starts on the first test
// that needs it, so the table tests run without it, and TestMain stops it.
var (
	envOnce sync.Once
	env     *envtest.Environment
	envCfg  *rest.Config
	envErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// startEnv returns the config of the package's envtest apiserver, starting
// it on first use from the binaries in KUBEBUILDER_ASSETS (default: the
// repository's bin/, which `make testbed-bin` fills).
func startEnv(t *testing.T) *rest.Config {
	t.Helper()
	envOnce.Do(func() {
		if os.Getenv("KUBEBUILDER_ASSETS") == "" {
			dir, err := filepath.Abs(filepath.Join("..", "..", "bin"))
			if err != nil {
				envErr = err
				return
			}
			os.Setenv("KUBEBUILDER_ASSETS", dir)
		}
		dir := os.Getenv("KUBEBUILDER_ASSETS")
		for _, bin := range []string{"kube-apiserver", "etcd"} {
			if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
				envErr = fmt.Errorf("%s is missing from KUBEBUILDER_ASSETS=%s; run `make testbed-bin` in the repository root", bin, dir)
				return
			}
		}
		env = &envtest.Environment{}
		envCfg, envErr = env.Start()
	})
	if envErr != nil {
		t.Fatalf("starting envtest: %v", envErr)
	}
	return envCfg
}
