package testutil

import (
	"context"
	"sync"
)

// Gate holds the calls that pass through it while a test holds it: a
// slow apiserver, or a write the test wants in flight while it looks at
// what others see. The zero Gate lets every call through.
type Gate struct {
	mu   sync.Mutex
	hold chan struct{}
	held chan struct{}
}

// Hold makes every Pass wait until release is called.
func (g *Gate) Hold() (release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	hold := make(chan struct{})
	g.hold, g.held = hold, make(chan struct{}, 64)
	return func() {
		g.mu.Lock()
		if g.hold == hold {
			g.hold = nil
		}
		g.mu.Unlock()
		close(hold)
	}
}

// Held receives a value for each call that started waiting since the
// last Hold (nil before the first).
func (g *Gate) Held() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

// Pass returns at once unless the gate is held; then it waits for the
// release, or returns ctx's error if ctx ends first (a test that failed
// while holding, its manager stopping).
func (g *Gate) Pass(ctx context.Context) error {
	g.mu.Lock()
	hold, held := g.hold, g.held
	g.mu.Unlock()
	if hold == nil {
		return nil
	}
	select {
	case held <- struct{}{}:
	default:
	}
	select {
	case <-hold:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
