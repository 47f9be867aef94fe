package integration

import (
	"io"
	"os"
	"testing"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

func TestMain(m *testing.M) {
	// Components log through the loggers the tests give them; this only
	// quiets controller-runtime's warning about its global logger.
	ctrllog.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	os.Exit(m.Run())
}
