package admission

import (
	"testing"

	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

var sharedEnv envtestenv.Shared

func TestMain(m *testing.M) { envtestenv.Main(m, &sharedEnv) }
