package works

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/apply"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// Controller keeps held Works applied and reported: the agent's Work
// reconciler. Its queue holds Work names, put there by the Store (a Work
// applied, or woken by its health signals) and by the events of the
// objects it watches: Deployments and Services by their flotilla.dev/work
// annotation, a Service's EndpointSlices by their flotilla.dev/work label,
// shared dependencies by the applied sets that hold them.
//
// It is a client-go workqueue with workers, as controller-runtime's
// controller is, without controller-runtime (whose packages link
// client-go's scheme of every API group): one Work is never reconciled by
// two workers at once, a failure is retried with exponential backoff, and
// a Work still held is looked at again every Resync.
type Controller struct {
	// Reader reads the Works' live objects (a cache holding the
	// Deployments, Services and EndpointSlices that carry the
	// flotilla.dev/work label and the dependencies that carry
	// flotilla.dev/dependency).
	Reader kclient.Reader
	Store  *Store
	// Resync re-examines every held Work this often, a backstop for
	// missed events (default 5 minutes).
	Resync time.Duration
	// Workers reconcile Works in parallel (default 4).
	Workers int
	// Log is the controller's logger; each reconcile's context carries it
	// with the Work's name.
	Log logr.Logger
	// Metrics, when set, take the queue's metrics (queue "work").
	Metrics *QueueMetrics

	once  sync.Once
	queue workqueue.TypedRateLimitingInterface[string]
}

// Watcher is a cache whose kinds the Controller watches (an
// informer.Cache).
type Watcher interface {
	OnChange(obj kclient.Object, fn func(kclient.Object)) error
}

func (c *Controller) init() {
	c.once.Do(func() {
		if c.Resync == 0 {
			c.Resync = 5 * time.Minute
		}
		if c.Workers == 0 {
			c.Workers = 4
		}
		cfg := workqueue.TypedRateLimitingQueueConfig[string]{Name: "work"}
		if c.Metrics != nil {
			cfg.MetricsProvider = c.Metrics
		}
		c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), cfg)
	})
}

// Watch registers the Controller's handlers on w, and makes the Store wake
// it. Call it before w starts.
func (c *Controller) Watch(w Watcher) error {
	c.init()
	c.Store.SetWake(c.Enqueue)
	byAnnotation := func(o kclient.Object) { c.enqueue(WorkOf(o)) }
	watches := []struct {
		obj kclient.Object
		fn  func(kclient.Object)
	}{
		{&appsv1.Deployment{}, byAnnotation},
		{&corev1.Service{}, byAnnotation},
		{&discoveryv1.EndpointSlice{}, func(o kclient.Object) {
			c.enqueue(c.Store.WorkOfLabel(o.GetLabels()[flotillav1.LabelWork]))
		}},
		{&corev1.ConfigMap{}, c.dependency(apply.ConfigMapKind)},
		{&corev1.Secret{}, c.dependency(apply.SecretKind)},
		{&corev1.ServiceAccount{}, c.dependency(apply.ServiceAccountKind)},
	}
	for _, w8 := range watches {
		if err := w.OnChange(w8.obj, w8.fn); err != nil {
			return fmt.Errorf("watching %T: %w", w8.obj, err)
		}
	}
	return nil
}

func (c *Controller) dependency(gvk schema.GroupVersionKind) func(kclient.Object) {
	return func(o kclient.Object) { c.enqueue(DependencyWorks(c.Store.applier.Holders, gvk, o)) }
}

func (c *Controller) enqueue(names []string) {
	for _, n := range names {
		c.queue.Add(n)
	}
}

// Enqueue asks for Work name to be reconciled.
func (c *Controller) Enqueue(name string) {
	c.init()
	c.queue.Add(name)
}

// NeedLeaderElection says the Controller runs on the leader only.
func (c *Controller) NeedLeaderElection() bool { return true }

// Start runs the workers until ctx ends, then waits for the reconciles in
// flight.
func (c *Controller) Start(ctx context.Context) error {
	c.init()
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range c.Workers {
		wg.Go(func() {
			for c.next(ctx) {
			}
		})
	}
	wg.Wait()
	return nil
}

// next reconciles one Work from the queue; false once the queue shut down.
func (c *Controller) next(ctx context.Context) bool {
	name, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(name)
	log := c.Log.WithValues("work", name)
	err := c.Reconcile(logr.NewContext(ctx, log), name)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			log.Error(err, "reconciling the Work failed; retrying with backoff")
		}
		c.queue.AddRateLimited(name)
	default:
		c.queue.Forget(name)
		if c.Store.get(name) != nil {
			c.queue.AddAfter(name, c.Resync)
		}
	}
	return true
}

// Reconcile re-applies Work name when its objects drifted and reports its
// status.
func (c *Controller) Reconcile(ctx context.Context, name string) error {
	return c.Store.Reconcile(ctx, name, func(w *flotillav1.Work) ([]kclient.Object, error) {
		return LiveObjects(ctx, c.Reader, w)
	})
}

// WorkOf is the Work whose object o is (by Flotilla's annotation); none
// for an object without it.
func WorkOf(o kclient.Object) []string {
	name := o.GetAnnotations()[flotillav1.AnnotationWork]
	if name == "" {
		return nil
	}
	return []string{name}
}

// DependencyWorks are the Works whose applied sets hold o, a shared
// dependency of kind gvk (holders is an Applier's Holders).
func DependencyWorks(holders func(flotillav1.ResourceIdentifier) []string, gvk schema.GroupVersionKind, o kclient.Object) []string {
	if o.GetLabels()[flotillav1.LabelDependency] != "true" {
		return nil
	}
	return holders(flotillav1.ResourceIdentifier{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: o.GetNamespace(), Name: o.GetName()})
}

// liveList is one list LiveObjects makes: of which kind, selected how.
type liveList struct {
	list kclient.ObjectList
	gvk  schema.GroupVersionKind
	sel  map[string]string
}

// LiveObjects lists work's objects of every kind a Work carries
// (apply.WorkKinds) from reader, a cache that holds the objects carrying
// the flotilla.dev/work label (Deployments, Services) or, for shared
// dependencies (ConfigMaps, Secrets, ServiceAccounts), the
// flotilla.dev/dependency label, as NeedsApply and Store.Reconcile take
// them. (A kind left out here would look deleted to NeedsApply, and its
// Work would be applied again on every event.) Shared dependencies carry
// the hub namespace, not the Work: all of that namespace's are listed,
// and NeedsApply picks the ones the Work applied by UID.
func LiveObjects(ctx context.Context, reader kclient.Reader, work *flotillav1.Work) ([]kclient.Object, error) {
	owned := map[string]string{flotillav1.LabelWork: flotillav1.WorkLabelValue(work.Name)}
	lists := []liveList{
		{&appsv1.DeploymentList{}, apply.DeploymentKind, owned},
		{&corev1.ServiceList{}, apply.ServiceKind, owned},
	}
	if ns := work.Labels[flotillav1.LabelMyAppNamespace]; ns != "" {
		deps := map[string]string{flotillav1.LabelDependency: "true", flotillav1.LabelMyAppNamespace: ns}
		lists = append(lists,
			liveList{&corev1.ConfigMapList{}, apply.ConfigMapKind, deps},
			liveList{&corev1.SecretList{}, apply.SecretKind, deps},
			liveList{&corev1.ServiceAccountList{}, apply.ServiceAccountKind, deps})
	}
	var out []kclient.Object
	for _, l := range lists {
		if err := reader.List(ctx, l.list, kclient.MatchingLabels("", l.sel)); err != nil {
			return nil, fmt.Errorf("listing the %ss of Work %s: %w", l.gvk.Kind, work.Name, err)
		}
		items, err := meta.ExtractList(l.list)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			o := it.(kclient.Object)
			// NeedsApply compares kinds; a cache's typed objects may carry none.
			o.GetObjectKind().SetGroupVersionKind(l.gvk)
			out = append(out, o)
		}
	}
	return out, nil
}
