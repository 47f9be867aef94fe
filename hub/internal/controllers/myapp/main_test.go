package myapp

import (
	"testing"

	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

// One apiserver serves the package's envtest tests; it starts on the first
// test that needs it, so the table tests run without it.
var sharedEnv envtestenv.Shared

func TestMain(m *testing.M) { envtestenv.Main(m, &sharedEnv) }
