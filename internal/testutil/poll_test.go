package testutil

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// countdown returns a check that fails n times, then succeeds.
func countdown(n int) func() error {
	return func() error {
		if n > 0 {
			n--
			return fmt.Errorf("%d to go", n+1)
		}
		return nil
	}
}

func TestPoll(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		timeout time.Duration
		check   func() error
		wantErr string // "" for success; otherwise a substring
		wantCtx bool   // the error wraps context.Canceled
	}{
		{name: "succeeds at once", ctx: context.Background(), timeout: time.Second, check: countdown(0)},
		{name: "succeeds after retries", ctx: context.Background(), timeout: time.Second, check: countdown(3)},
		{name: "times out with the last error", ctx: context.Background(), timeout: 20 * time.Millisecond,
			check: func() error { return errors.New("never") }, wantErr: "never"},
		{name: "checks once even when the context has ended", ctx: canceled, timeout: time.Second, check: countdown(0)},
		{name: "an ended context stops it with both errors", ctx: canceled, timeout: time.Second,
			check: func() error { return errors.New("not yet") }, wantErr: "not yet", wantCtx: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Poll(tt.ctx, tt.timeout, tt.check, Every(time.Millisecond))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Poll: %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Poll: %v, want an error containing %q", err, tt.wantErr)
			}
			if got := errors.Is(err, context.Canceled); got != tt.wantCtx {
				t.Fatalf("errors.Is(%v, context.Canceled) = %t, want %t", err, got, tt.wantCtx)
			}
		})
	}
}

// fakeTB records Fatalf and stops the goroutine, as testing.T does.
type fakeTB struct {
	testing.TB
	mu     sync.Mutex
	failed string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failed = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// run calls fn with a fakeTB in its own goroutine and returns the Fatalf
// message, or "" when fn returned without failing.
func run(fn func(tb testing.TB)) string {
	tb := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(tb)
	}()
	<-done
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.failed
}

func TestEventually(t *testing.T) {
	if msg := run(func(tb testing.TB) { Eventually(tb, "the thing", time.Second, countdown(2), Every(time.Millisecond)) }); msg != "" {
		t.Fatalf("Eventually failed: %s", msg)
	}
	msg := run(func(tb testing.TB) {
		Eventually(tb, "the thing", 10*time.Millisecond, func() error { return errors.New("still 3 left") }, Every(time.Millisecond))
	})
	if !strings.Contains(msg, "the thing") || !strings.Contains(msg, "still 3 left") {
		t.Fatalf("failure message %q names neither what nor the last error", msg)
	}
}

func TestEventuallyStable(t *testing.T) {
	// Fails twice, holds, fails once more, then holds for good: only the
	// second stretch is long enough.
	calls := 0
	flaky := func() error {
		calls++
		if calls <= 2 || calls == 5 {
			return fmt.Errorf("call %d failed", calls)
		}
		return nil
	}
	if msg := run(func(tb testing.TB) {
		EventuallyStable(tb, "flaky", 5*time.Second, 250*time.Millisecond, flaky, Every(time.Millisecond))
	}); msg != "" {
		t.Fatalf("EventuallyStable failed: %s", msg)
	}
	if calls < 6 {
		t.Fatalf("EventuallyStable returned after %d calls, before the failure at call 5", calls)
	}

	// A check that never holds long enough fails, naming what.
	flip := false
	msg := run(func(tb testing.TB) {
		EventuallyStable(tb, "the flip-flop", 30*time.Millisecond, time.Hour, func() error {
			flip = !flip
			if flip {
				return errors.New("flopped")
			}
			return nil
		}, Every(time.Millisecond))
	})
	if !strings.Contains(msg, "the flip-flop") || !strings.Contains(msg, "did not settle") {
		t.Fatalf("failure message %q does not say what did not settle", msg)
	}
}

func TestConsistently(t *testing.T) {
	calls := 0
	if msg := run(func(tb testing.TB) {
		Consistently(tb, "the steady thing", 20*time.Millisecond, func() error { calls++; return nil }, Every(time.Millisecond))
	}); msg != "" {
		t.Fatalf("Consistently failed: %s", msg)
	}
	if calls < 2 {
		t.Fatalf("check ran %d times in 20ms at a 1ms interval", calls)
	}
	msg := run(func(tb testing.TB) {
		Consistently(tb, "the steady thing", time.Second, countdown(0), Every(time.Millisecond))
		Consistently(tb, "the shaky thing", time.Second, func() error { return errors.New("shook") }, Every(time.Millisecond))
	})
	if !strings.Contains(msg, "the shaky thing") || !strings.Contains(msg, "shook") {
		t.Fatalf("failure message %q names neither what nor the error", msg)
	}
}
