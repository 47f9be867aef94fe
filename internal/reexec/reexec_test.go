package reexec

import (
	"errors"
	"fmt"
	"slices"
	"testing"
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
