package reexec

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/go-logr/logr"
)

func TestLostLease(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{errors.New("leader election lost"), true},
		{fmt.Errorf("running the agent: %w", errors.New("leader election lost")), true},
		{nil, false},
		{errors.New("failed to wait for caches to sync"), false},
		{errors.New("agent: loading the member kubeconfig: no such file"), false},
	} {
		if got := LostLease(c.err); got != c.want {
			t.Errorf("LostLease(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestEnvironCountsRestarts(t *testing.T) {
	env := []string{"PATH=/bin", EnvRestarts + "=2", "POD_NAME=agent-0", EnvRestarts + "=7"}
	got := Environ(env, 3)
	want := []string{"PATH=/bin", "POD_NAME=agent-0", EnvRestarts + "=3"}
	if !slices.Equal(got, want) {
		t.Fatalf("Environ(%q, 3) = %q, want %q (every earlier count replaced, the rest kept in order)", env, got, want)
	}
	t.Setenv(EnvRestarts, "3")
	if n := Restarts(); n != 3 {
		t.Fatalf("Restarts() = %d with %s=3", n, EnvRestarts)
	}
	for _, bad := range []string{"", "x", "-1"} {
		t.Setenv(EnvRestarts, bad)
		if n := Restarts(); n != 0 {
			t.Errorf("Restarts() = %d with %s=%q, want 0", n, EnvRestarts, bad)
		}
	}
}

// TestAfterRunPassesOtherErrorsOn: an error other than a lost Lease, or a
// lost Lease after the process was told to stop, is returned as it is
// (no exec: that would replace the test binary).
func TestAfterRunPassesOtherErrorsOn(t *testing.T) {
	other := errors.New("failed to wait for caches to sync")
	if got := AfterRun(context.Background(), logr.Discard(), other); got != other {
		t.Fatalf("AfterRun(%v) = %v, want the error itself", other, got)
	}
	if got := AfterRun(context.Background(), logr.Discard(), nil); got != nil {
		t.Fatalf("AfterRun(nil) = %v", got)
	}
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	lost := errors.New("leader election lost")
	if got := AfterRun(stopped, logr.Discard(), lost); got != lost {
		t.Fatalf("AfterRun after a signal = %v, want the error itself", got)
	}
}
