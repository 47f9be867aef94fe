package server

import (
	"container/list"
	"math"
	"time"

	"golang.org/x/time/rate"
)

// deletePacer paces one stream's WorkDeletes with a token bucket: Burst at
// once, then Rate per second. A delete that finds no token waits in a
// first-in first-out list of Work names, outside the stream's queue, so
// upserts and orphans of other Works go on at once. Only the stream's send
// loop uses it.
type deletePacer struct {
	tokenTimer
	waiting *list.List               // Work names, oldest first
	index   map[string]*list.Element // name -> its element in waiting
	logged  bool                     // the first wait of this stream was logged
}

// tokenTimer is a token bucket with a timer that fires when its next
// token is due, so a pacer's waiting work resumes from the stream's select
// loop instead of a goroutine of its own. The delete and status pacers
// embed it.
type tokenTimer struct {
	limiter *rate.Limiter
	timer   *time.Timer
	armed   bool // the timer runs (or fired and is not handled yet)
}

func newTokenTimer(r float64, burst int) tokenTimer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return tokenTimer{limiter: rate.NewLimiter(rate.Limit(r), burst), timer: t}
}

// arm starts the timer for the next token, unless it already runs.
func (t *tokenTimer) arm(now time.Time) {
	if t.armed {
		return
	}
	// The time until one whole token, rounded up to a millisecond so the
	// timer does not fire a hair early and find 0.9999 tokens.
	// A very low rate is checked again after an hour rather than
	// overflow the duration.
	d := time.Millisecond
	if need := 1 - t.limiter.TokensAt(now); need > 0 {
		d += time.Duration(min(need/float64(t.limiter.Limit()), time.Hour.Seconds()) * float64(time.Second))
	}
	t.timer.Reset(d)
	t.armed = true
}

// fired records that the timer's tick was received.
func (t *tokenTimer) fired() { t.armed = false }

// newDeletePacer returns a pacer of r deletes per second after burst at
// once, or nil (no pacing) for a negative or infinite r.
func newDeletePacer(r float64, burst int) *deletePacer {
	if r < 0 || math.IsInf(r, 1) {
		return nil
	}
	return &deletePacer{
		tokenTimer: newTokenTimer(r, burst),
		waiting:    list.New(),
		index:      make(map[string]*list.Element),
	}
}

// ready fires when the oldest waiting delete may have a token. It is nil,
// and so never fires, without pacing.
func (p *deletePacer) ready() <-chan time.Time {
	if p == nil {
		return nil
	}
	return p.timer.C
}

// allow takes a token if one is there.
func (p *deletePacer) allow(now time.Time) bool { return p.limiter.AllowN(now, 1) }

// has says whether name waits.
func (p *deletePacer) has(name string) bool {
	_, ok := p.index[name]
	return ok
}

// push adds name at the back of the waiting list.
func (p *deletePacer) push(name string) { p.index[name] = p.waiting.PushBack(name) }

// front returns the oldest waiting name.
func (p *deletePacer) front() (string, bool) {
	e := p.waiting.Front()
	if e == nil {
		return "", false
	}
	return e.Value.(string), true
}

// remove takes name off the waiting list; it reports whether it waited.
func (p *deletePacer) remove(name string) bool {
	e, ok := p.index[name]
	if ok {
		p.waiting.Remove(e)
		delete(p.index, name)
	}
	return ok
}

func (p *deletePacer) len() int { return p.waiting.Len() }

func (p *deletePacer) stop() {
	if p != nil {
		p.timer.Stop()
	}
}
