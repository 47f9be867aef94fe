// Package rollout is the pure logic of a Progressive rollout: what a
// revision is (the image, the pod template and the image / env overrides of
// a MyApp, named by a hash), and one Step of a rollout — from the previous
// RolloutStatus, the spec, the target clusters with their Works and now, to
// the new status, the revision each cluster renders, the events to tell and
// when to look again. Waves go in the policy's order with maxConcurrency
// clusters at a time; a cluster succeeds when its member reports the
// revision updated and available for minSuccessTime, and fails past
// progressDeadline or on ProgressDeadlineExceeded; past maxFailures the
// rollout pauses or rolls back. With no replica on any target cluster (the
// app is scaled to zero) there is nothing to wait for: a new revision
// completes in one step, unless the rollout is paused. Every piece of state lives in the returned
// status, so a restarted hub continues where the old one stood.
//
// It has no client, clock or goroutine: the hub's MyApp controller reads
// the world, calls Step, and writes the status and Works.
package rollout
