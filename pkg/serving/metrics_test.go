package serving

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/serving/internal/scrapetest"
	"github.com/flotilla-dev/flotilla/test/deployrbac"
	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

var sharedEnv envtestenv.Shared

func TestMain(m *testing.M) { envtestenv.Main(m, &sharedEnv) }

// The hub's secure /metrics: controller-runtime's metrics server, built
// from MetricsOptions and the apiserver's config as the hub's manager
// builds it, answers through metricsauth's filter on a direct client:
// 200 to the reader, 403 to an identity without the grant, 401 to a
// made-up token and to none.
func TestSecureMetricsOptionsReviewScrapers(t *testing.T) {
	admin := sharedEnv.Config(t)
	s := scrapetest.New(t, admin)
	// Something of the test's own in controller-runtime's registry, which
	// the server serves.
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "flotilla_serving_test_total", Help: "A counter of the test."})
	if err := metrics.Registry.Register(c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { metrics.Registry.Unregister(c) })

	srv, err := metricsserver.NewServer(MetricsOptions("127.0.0.1:0", true), admin, http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the metrics server did not stop within 30 s")
		}
	})
	// controller-runtime tells the address it chose for port 0 through a
	// method outside its Server interface.
	bound, ok := srv.(interface{ GetBindAddr() string })
	if !ok {
		t.Fatalf("%T does not tell its address", srv)
	}
	var addr string
	testutil.Eventually(t, "the metrics server listening", 10*time.Second, func() error {
		if addr = bound.GetBindAddr(); addr == "" {
			return errors.New("no address yet")
		}
		return nil
	})
	for _, tt := range []struct {
		who, token string
		want       int
	}{
		{"the reader", s.Reader, http.StatusOK},
		{"an identity without the grant", s.Nobody, http.StatusForbidden},
		{"a made-up token", "not-a-token", http.StatusUnauthorized},
		{"no token", "", http.StatusUnauthorized},
	} {
		code, body, err := deployrbac.GetMetrics(ctx, addr, tt.token)
		if err != nil {
			t.Fatalf("%s: %v", tt.who, err)
		}
		if code != tt.want || (code == http.StatusOK) != strings.Contains(body, "flotilla_serving_test_total") {
			t.Errorf("%s: %d %.200q, want %d (the metrics with 200 only)", tt.who, code, body, tt.want)
		}
	}
}
