package testutil

import (
	"context"
	"errors"
	"testing"
	"time"
)

// DefaultInterval is how often the pollers check unless given Every.
const DefaultInterval = 50 * time.Millisecond

// Option changes how a poller checks.
type Option func(*options)

type options struct {
	interval time.Duration
}

// Every makes a poller check every d instead of DefaultInterval: shorter
// for in-memory fakes, longer for real clusters that each check loads.
func Every(d time.Duration) Option {
	return func(o *options) { o.interval = d }
}

func newOptions(opts []Option) options {
	o := options{interval: DefaultInterval}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Eventually calls check until it returns nil or timeout passes, then
// fails the test naming what did not converge and check's last error.
func Eventually(t testing.TB, what string, timeout time.Duration, check func() error, opts ...Option) {
	t.Helper()
	if err := Poll(context.Background(), timeout, check, opts...); err != nil {
		t.Fatalf("%s did not converge within %s: %v", what, timeout, err)
	}
}

// EventuallyStable calls check until it has returned nil continuously for
// hold, or fails the test after timeout naming what did not settle and
// check's last error. A single error restarts the hold.
func EventuallyStable(t testing.TB, what string, timeout, hold time.Duration, check func() error, opts ...Option) {
	t.Helper()
	o := newOptions(opts)
	deadline := time.Now().Add(timeout)
	var since time.Time
	for {
		err := check()
		switch {
		case err != nil:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= hold:
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not settle (hold %s) within %s: %v", what, hold, timeout, err)
		}
		time.Sleep(o.interval)
	}
}

// Consistently calls check for d and fails the test at the first error,
// naming what did not hold.
func Consistently(t testing.TB, what string, d time.Duration, check func() error, opts ...Option) {
	t.Helper()
	o := newOptions(opts)
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := check(); err != nil {
			t.Fatalf("%s did not hold for %s: %v", what, d, err)
		}
		time.Sleep(o.interval)
	}
}

// Poll calls check until it returns nil, and then returns nil. Once
// timeout has passed it returns check's last error; when ctx ends first,
// that error joined with ctx's. check runs at least once, even if ctx has
// already ended.
func Poll(ctx context.Context, timeout time.Duration, check func() error, opts ...Option) error {
	o := newOptions(opts)
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(o.interval):
		}
	}
}
