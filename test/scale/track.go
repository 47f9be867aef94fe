package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/fleet"
)

// tracker watches MyApps and MemberClusters on the hub and times when
// each reaches a goal: the time of the watch event that shows it, not of a
// poll.
type tracker struct {
	cache  cache.Cache
	cancel context.CancelFunc

	mu      sync.Mutex
	apps    map[string]*flotillav1.MyApp
	members map[string]*flotillav1.MemberCluster
	goals   []*goal
}

// goal is a condition on a set of objects of one kind.
type goal struct {
	kind string // "app" or "member"
	pred func(client.Object) bool
	want map[string]bool
	met  map[string]time.Time
	done chan struct{}
}

func startTracker(ctx context.Context, cfg *rest.Config) (*tracker, error) {
	c, err := cache.New(cfg, cache.Options{Scheme: fleet.Scheme(), DefaultNamespaces: nil,
		// The harness reads only status and labels; managedFields are the
		// bulk of a stored object at this size.
		DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return nil, err
	}
	t := &tracker{cache: c, apps: map[string]*flotillav1.MyApp{}, members: map[string]*flotillav1.MemberCluster{}}
	cctx, cancel := context.WithCancel(ctx)
	t.cancel = cancel
	for _, obj := range []client.Object{&flotillav1.MyApp{}, &flotillav1.MemberCluster{}} {
		inf, err := c.GetInformer(cctx, obj)
		if err != nil {
			cancel()
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { t.observe(o, false) },
			UpdateFunc: func(_, o any) { t.observe(o, false) },
			DeleteFunc: func(o any) { t.observe(o, true) },
		}); err != nil {
			cancel()
			return nil, err
		}
	}
	go func() { _ = c.Start(cctx) }()
	if !c.WaitForCacheSync(cctx) {
		cancel()
		return nil, fmt.Errorf("the harness's watches of the hub did not sync")
	}
	return t, nil
}

func (t *tracker) stop() { t.cancel() }

func (t *tracker) observe(o any, deleted bool) {
	now := time.Now()
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var kind, name string
	var obj client.Object
	switch x := o.(type) {
	case *flotillav1.MyApp:
		kind, name, obj = "app", x.Name, x
		if deleted {
			delete(t.apps, name)
		} else {
			t.apps[name] = x
		}
	case *flotillav1.MemberCluster:
		kind, name, obj = "member", x.Name, x
		if deleted {
			delete(t.members, name)
		} else {
			t.members[name] = x
		}
	default:
		return
	}
	if deleted {
		return
	}
	for _, g := range t.goals {
		g.check(kind, name, obj, now)
	}
}

func (g *goal) check(kind, name string, obj client.Object, now time.Time) {
	if g.kind != kind || !g.want[name] {
		return
	}
	if _, ok := g.met[name]; ok {
		return
	}
	if g.pred(obj) {
		g.met[name] = now
		if len(g.met) == len(g.want) {
			close(g.done)
		}
	}
}

// expect registers a goal on the named objects of kind; objects that
// already meet it count as met now.
func (t *tracker) expect(kind string, names []string, pred func(client.Object) bool) *goal {
	g := &goal{kind: kind, pred: pred, want: map[string]bool{}, met: map[string]time.Time{}, done: make(chan struct{})}
	for _, n := range names {
		g.want[n] = true
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.goals = append(t.goals, g)
	if len(g.want) == 0 {
		close(g.done)
		return g
	}
	for n := range g.want {
		if kind == "app" {
			if a := t.apps[n]; a != nil {
				g.check(kind, n, a, now)
			}
		} else if m := t.members[n]; m != nil {
			g.check(kind, n, m, now)
		}
	}
	return g
}

// wait waits for g until timeout, then drops it. On timeout the error
// names how many objects, and which first few, did not get there.
func (t *tracker) wait(ctx context.Context, g *goal, what string, timeout time.Duration) (map[string]time.Time, error) {
	defer t.drop(g)
	select {
	case <-g.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(timeout):
		t.mu.Lock()
		var missing []string
		for n := range g.want {
			if _, ok := g.met[n]; !ok {
				missing = append(missing, n)
			}
		}
		t.mu.Unlock()
		sort.Strings(missing)
		return nil, fmt.Errorf("%s: %d of %d did not converge within %s (first: %v)", what, len(missing), len(g.want), timeout, missing[:min(5, len(missing))])
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]time.Time, len(g.met))
	for k, v := range g.met {
		out[k] = v
	}
	return out, nil
}

func (t *tracker) drop(g *goal) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, x := range t.goals {
		if x == g {
			t.goals = append(t.goals[:i], t.goals[i+1:]...)
			return
		}
	}
}

// app returns the last seen copy of MyApp name (nil if none).
func (t *tracker) app(name string) *flotillav1.MyApp {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.apps[name]
}

// appsOn lists the MyApps whose status assigns replicas to member.
func (t *tracker) appsOn(member string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for name, a := range t.apps {
		for _, c := range a.Status.Clusters {
			if c.Name == member && c.Assigned > 0 {
				out = append(out, name)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// memberReady says a MemberCluster is Ready.
func memberReady(o client.Object) bool {
	mc := o.(*flotillav1.MemberCluster)
	return meta.IsStatusConditionTrue(mc.Status.Conditions, flotillav1.ConditionReady)
}

// appReady says a MyApp's status is about its current spec and Ready.
func appReady(o client.Object) bool {
	a := o.(*flotillav1.MyApp)
	return a.Status.ObservedGeneration == a.Generation && meta.IsStatusConditionTrue(a.Status.Conditions, flotillav1.ConditionReady)
}

// appReadyWithout says a MyApp is Ready with no replica on member.
func appReadyWithout(member string) func(client.Object) bool {
	return func(o client.Object) bool {
		if !appReady(o) {
			return false
		}
		for _, c := range o.(*flotillav1.MyApp).Status.Clusters {
			if c.Name == member && c.Assigned > 0 {
				return false
			}
		}
		return true
	}
}

// runsWithout says a MyApp's replicas are all ready outside member, which
// is assigned none: they run elsewhere (the MyApp's Ready condition may
// wait longer, for the lost member's Work to be purged).
func runsWithout(member string) func(client.Object) bool {
	return func(o client.Object) bool {
		a := o.(*flotillav1.MyApp)
		var ready int32
		for _, c := range a.Status.Clusters {
			if c.Name == member {
				if c.Assigned > 0 {
					return false
				}
				continue
			}
			ready += c.ReadyReplicas
		}
		return a.Status.DesiredReplicas > 0 && ready >= a.Status.DesiredReplicas
	}
}
