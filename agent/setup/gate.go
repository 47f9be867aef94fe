package setup

import (
	"context"
	"time"

	"github.com/go-logr/logr"
)

// streamRunner is the sync client's Run.
type streamRunner func(ctx context.Context) error

// memberGate holds the stream to the hub only while the member's apiserver
// answers. An agent whose member is down would otherwise keep heartbeating
// for a cluster that runs nothing new and reports nothing true; closing the
// stream lets the hub's health controller see the member as lost and fail
// over. The stream opens again once the member answers.
type memberGate struct {
	run   streamRunner
	check func(ctx context.Context) error
	// interval between checks, and failAfter consecutive failures close
	// the stream.
	interval  time.Duration
	failAfter int
	log       logr.Logger
}

// By default the gate checks the member every second and closes the
// stream after three failed checks in a row, so one slow answer does not
// cost a reconnect.
const (
	memberCheckInterval = time.Second
	memberFailAfter     = 3
)

// newMemberGate returns a gate that runs run while check passes, with the
// default interval and failure count.
func newMemberGate(run streamRunner, check func(ctx context.Context) error, log logr.Logger) *memberGate {
	return &memberGate{run: run, check: check, interval: memberCheckInterval, failAfter: memberFailAfter, log: log}
}

// NeedLeaderElection: only the leader holds the stream.
func (g *memberGate) NeedLeaderElection() bool { return true }

// Start runs until ctx ends.
func (g *memberGate) Start(ctx context.Context) error {
	for {
		// Wait for the member.
		for {
			if err := g.check(ctx); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(g.interval):
			}
		}
		streamCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- g.run(streamCtx) }()
		failures := 0
	watch:
		for {
			select {
			case <-ctx.Done():
				cancel()
				<-done
				return nil
			case err := <-done:
				cancel()
				return err
			case <-time.After(g.interval):
			}
			if err := g.check(ctx); err != nil {
				failures++
				if failures >= g.failAfter {
					g.log.Info("the member apiserver does not answer; closing the stream to the hub so it can fail over", "error", err.Error())
					cancel()
					<-done
					break watch
				}
				continue
			}
			failures = 0
		}
	}
}
