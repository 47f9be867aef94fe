package memberprobe

import (
	"net"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

var sharedEnv envtestenv.Shared

func TestMain(m *testing.M) { envtestenv.Main(m, &sharedEnv) }

// TestProbeARealAPIServer: /readyz answers ok and the version is the
// apiserver's; an address where nothing listens fails /readyz, naming it,
// and gives no version.
func TestProbeARealAPIServer(t *testing.T) {
	cfg := sharedEnv.Config(t)
	ready, err := Readyz(cfg)
	if err != nil {
		t.Fatalf("building the /readyz check: %v", err)
	}
	if err := ready(t.Context()); err != nil {
		t.Errorf("/readyz of a running apiserver: %v", err)
	}
	if v := ServerVersion(cfg); !strings.HasPrefix(v, "v1.") {
		t.Errorf("ServerVersion = %q, want the apiserver's v1.x version", v)
	}

	// A loopback port that was free a moment ago: nothing answers.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	gone := rest.CopyConfig(cfg)
	gone.Host = "https://" + addr
	ready, err = Readyz(gone)
	if err != nil {
		t.Fatalf("building the /readyz check: %v", err)
	}
	if err := ready(t.Context()); err == nil || !strings.Contains(err.Error(), "/readyz") {
		t.Errorf("/readyz where nothing listens: %v, want an error naming /readyz", err)
	}
	if v := ServerVersion(gone); v != "" {
		t.Errorf("ServerVersion where nothing listens = %q, want \"\"", v)
	}
}
