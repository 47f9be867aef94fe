package main

import (
	"testing"
	"time"
)

// TestExpectThenRunsOnceWithTheEventTime checks that expectThen's action
// runs once, when the condition first becomes true, with the time of the
// event that made it true, and that the waiter is stamped with the same
// time.
func TestExpectThenRunsOnceWithTheEventTime(t *testing.T) {
	o := newObserver()
	ready := false
	calls := make(chan time.Time, 4)
	w := o.expectThen(func(*observer) bool { return ready }, func(at time.Time) { calls <- at })

	o.update(time.Unix(100, 0), func() {})
	select {
	case at := <-calls:
		t.Fatalf("then ran at %s before its condition held", at)
	case <-time.After(50 * time.Millisecond):
	}

	event := time.Unix(200, 0)
	o.update(event, func() { ready = true })
	select {
	case at := <-calls:
		if !at.Equal(event) {
			t.Fatalf("then ran with %s, want the event's time %s", at, event)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("then did not run within 10s of its condition becoming true")
	}
	stamped, err := w.wait(t.Context(), 10*time.Second, "the waiter")
	if err != nil {
		t.Fatal(err)
	}
	if !stamped.Equal(event) {
		t.Fatalf("the waiter was stamped %s, want %s", stamped, event)
	}

	o.update(time.Unix(300, 0), func() {})
	select {
	case at := <-calls:
		t.Fatalf("then ran a second time (at %s)", at)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestExpectThenOnAConditionAlreadyTrue checks that a condition true at
// registration runs its action at once.
func TestExpectThenOnAConditionAlreadyTrue(t *testing.T) {
	o := newObserver()
	calls := make(chan time.Time, 1)
	o.expectThen(func(*observer) bool { return true }, func(at time.Time) { calls <- at })
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("then did not run within 10s for a condition true at registration")
	}
}
