package server

import (
	"fmt"
	"testing"
	"time"
)

func TestQueueCoalescesInFirstInOrder(t *testing.T) {
	var depths []int
	q := newQueue(10, func(n int) { depths = append(depths, n) })
	now := time.Unix(100, 0)
	for _, name := range []string{"a", "b", "a", "c", "b", "a"} {
		if !q.add(name, now) {
			t.Fatalf("add(%s) refused below the limit", name)
		}
		now = now.Add(time.Second)
	}
	if d, hi := q.depth(); d != 3 || hi != 3 {
		t.Fatalf("depth = %d (highest %d), want 3: repeated names must coalesce", d, hi)
	}
	var got []string
	for {
		name, queued, ok := q.pop()
		if !ok {
			break
		}
		got = append(got, fmt.Sprintf("%s@%d", name, queued.Unix()))
	}
	// Order and time are those of each name's first add.
	if want := "[a@100 b@101 c@103]"; fmt.Sprint(got) != want {
		t.Errorf("popped %v, want %s", got, want)
	}
	if fmt.Sprint(depths) != "[1 2 3 2 1 0]" {
		t.Errorf("depth reports = %v", depths)
	}
}

func TestQueueBound(t *testing.T) {
	q := newQueue(2, nil)
	now := time.Now()
	if !q.add("a", now) || !q.add("b", now) {
		t.Fatal("refused below the limit")
	}
	if !q.add("a", now) {
		t.Error("a queued name was refused at the limit; it coalesces and costs nothing")
	}
	if q.add("c", now) {
		t.Error("a new name was accepted past the limit")
	}
	q.pop()
	if !q.add("c", now) {
		t.Error("refused after room was made")
	}
}

// TestQueueReusesItsArray checks that steady traffic does not grow the
// queue's backing array without bound.
func TestQueueReusesItsArray(t *testing.T) {
	q := newQueue(100, nil)
	now := time.Now()
	for i := range 100_000 {
		q.add(fmt.Sprint(i%50), now)
		if i%3 == 0 {
			q.pop()
		}
	}
	if c := cap(q.order); c > 4096 {
		t.Errorf("backing array grew to %d for at most 100 pending names", c)
	}
	for {
		if _, _, ok := q.pop(); !ok {
			break
		}
	}
	if d, _ := q.depth(); d != 0 || len(q.order) != 0 {
		t.Errorf("drained queue has depth %d and %d order entries", d, len(q.order))
	}
}

// TestQueueSignal checks that a waiting sender is woken once per batch
// and that adds never block.
func TestQueueSignal(t *testing.T) {
	q := newQueue(10, nil)
	for i := range 5 {
		q.add(fmt.Sprint(i), time.Now())
	}
	select {
	case <-q.ready:
	default:
		t.Fatal("no wake-up after adds")
	}
	select {
	case <-q.ready:
		t.Fatal("a second wake-up for the same batch")
	default:
	}
}
