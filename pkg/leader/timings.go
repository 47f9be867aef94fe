package leader

import (
	"flag"
	"fmt"
	"time"
)

// LeaseTimings are a manager's leader election timings: how long a Lease
// is valid (a replica that takes over a dead leader's Lease waits this
// long), how long the leader keeps retrying a renewal before it gives up
// leading, and how often candidates retry.
type LeaseTimings struct {
	Duration, RenewDeadline, RetryPeriod time.Duration
}

// jitter is client-go's leader election jitter factor: the renew
// deadline must exceed it times the retry period.
const jitter = 1.2

// AddFlags registers --leader-election-lease-duration,
// --leader-election-renew-deadline and --leader-election-retry-period on
// fs, with l's values as their defaults.
func (l *LeaseTimings) AddFlags(fs *flag.FlagSet) {
	fs.DurationVar(&l.Duration, "leader-election-lease-duration", l.Duration, "how long a leader election Lease is valid: a replica replacing a leader that died waits this long")
	fs.DurationVar(&l.RenewDeadline, "leader-election-renew-deadline", l.RenewDeadline, "how long the leader retries renewing its Lease before it stops leading (less than the lease duration)")
	fs.DurationVar(&l.RetryPeriod, "leader-election-retry-period", l.RetryPeriod, "how often replicas try to take or renew the Lease (the renew deadline must exceed 1.2 times it)")
}

// Validate says which flag is wrong, as client-go would refuse it later
// (and less clearly) at start.
func (l LeaseTimings) Validate() error {
	switch {
	case l.Duration <= 0:
		return fmt.Errorf("--leader-election-lease-duration %s: must be positive", l.Duration)
	case l.RenewDeadline <= 0:
		return fmt.Errorf("--leader-election-renew-deadline %s: must be positive", l.RenewDeadline)
	case l.RetryPeriod <= 0:
		return fmt.Errorf("--leader-election-retry-period %s: must be positive", l.RetryPeriod)
	case l.Duration <= l.RenewDeadline:
		return fmt.Errorf("--leader-election-lease-duration %s must exceed --leader-election-renew-deadline %s", l.Duration, l.RenewDeadline)
	case float64(l.RenewDeadline) <= jitter*float64(l.RetryPeriod):
		return fmt.Errorf("--leader-election-renew-deadline %s must exceed 1.2 times --leader-election-retry-period %s", l.RenewDeadline, l.RetryPeriod)
	}
	return nil
}

// OrDefault is l, or def where l is zero (Options built in code).
func (l LeaseTimings) OrDefault(def LeaseTimings) LeaseTimings {
	if l == (LeaseTimings{}) {
		return def
	}
	return l
}
