package testutil

import (
	"context"
	"testing"
	"time"
)

// TestGate: an open gate lets calls through; a held one keeps them until
// the release, tells of each waiting call, and lets go of a call whose
// context ends.
func TestGate(t *testing.T) {
	var g Gate
	if err := g.Pass(context.Background()); err != nil {
		t.Fatalf("an open gate: %v", err)
	}
	release := g.Hold()
	passed := make(chan error, 1)
	go func() { passed <- g.Pass(context.Background()) }()
	select {
	case <-g.Held():
	case <-time.After(10 * time.Second):
		t.Fatal("a call waiting at the held gate was not told of within 10s")
	}
	select {
	case err := <-passed:
		t.Fatalf("a call passed a held gate: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	select {
	case err := <-passed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not pass within 10s of the release")
	}

	defer g.Hold()()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Pass(ctx); err != context.Canceled {
		t.Fatalf("a call whose context ended got %v, want %v", err, context.Canceled)
	}
}
