package leastprivilege

import (
	"testing"

	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

// One apiserver serves the package's tests.
var sharedEnv envtestenv.Shared

func TestMain(m *testing.M) { envtestenv.Main(m, &sharedEnv) }
