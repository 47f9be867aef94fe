package crclient

import (
	"testing"

	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

// One apiserver serves the package's tests; it starts on the first test
// that needs it, so the table tests run without it.
var sharedEnv envtestenv.Shared

func TestMain(m *testing.M) { envtestenv.Main(m, &sharedEnv) }

// startEnv returns the config of the package's envtest apiserver.
func startEnv(t *testing.T) *rest.Config { return sharedEnv.Config(t) }
