//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"
)

// Joining and certificate rotation (docs/joining.md). They run after
// safety_test.go's specs: the join spec adds a fourth member and takes it
// out again; the rotation spec starts a fleet of its own with two-minute
// certificates and watches it for three lifetimes. That fleet is the
// spec's alone, so the spec is independent of the suite's fleet: its six
// minutes run beside the other independent specs.

func TestJoin(t *testing.T) { JoinSpec(t, input(t, "join")) }
func TestCertificateRotation(t *testing.T) {
	independent(t)
	track(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	short, err := startRotationFleet(ctx)
	cancel()
	if err != nil {
		t.Fatalf("starting the fleet with short-lived certificates: %v", err)
	}
	if short == nil {
		t.Skipf("the %s provider cannot start a fleet with short-lived certificates", provider.Name())
	}
	// Registered first, so it runs after the spec's own cleanup.
	t.Cleanup(func() {
		if err := short.Stop(); err != nil {
			t.Errorf("stopping the rotation fleet: %v", err)
		}
	})
	CertificateRotationSpec(t, newSpecInput(t, short, artifacts, "rotation"), testbedCertificateLifetime)
}
