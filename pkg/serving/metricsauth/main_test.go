package metricsauth

import (
	"testing"

	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

// sharedEnv is the package's apiserver, started by the first test that
// reviews against it.
var sharedEnv envtestenv.Shared

func TestMain(m *testing.M) { envtestenv.Main(m, &sharedEnv) }
