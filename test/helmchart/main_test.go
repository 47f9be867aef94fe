package helmchart

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func TestMain(m *testing.M) {
	// envtest logs through controller-runtime's logger; nothing to show.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}
