package syncbridge

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/metrics"
	"github.com/flotilla-dev/flotilla/internal/ssa"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

// +kubebuilder:rbac:groups=flotilla.dev,resources=works/status,verbs=get;update;patch

// StatusWriter writes agents' status reports into Work status. Reports are
// coalesced per Work (the latest wins while a write is pending) and written
// by Workers goroutines in parallel, so a burst of reports from many agents
// costs one patch per Work, not one per report, and no agent waits for
// another's writes. It is a manager Runnable that runs on the leader only,
// where the sync server runs.
type StatusWriter struct {
	// Client writes Work status.
	Client client.Client
	// Reader reads Works (the cache).
	Reader client.Reader
	// Workers is the number of parallel writers (default 8).
	Workers int

	mu      sync.Mutex
	pending map[client.ObjectKey]*flotillav1.WorkStatus
	// written is the last status applied per Work, bounded by the number
	// of Works (entries go when their Work does).
	written map[client.ObjectKey]*writtenStatus
	queue   workqueue.TypedRateLimitingInterface[client.ObjectKey]
	once    sync.Once
}

var _ syncserver.StatusSink = (*StatusWriter)(nil)

func (w *StatusWriter) init() {
	w.once.Do(func() {
		w.pending = map[client.ObjectKey]*flotillav1.WorkStatus{}
		w.written = map[client.ObjectKey]*writtenStatus{}
		w.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[client.ObjectKey](),
			workqueue.TypedRateLimitingQueueConfig[client.ObjectKey]{Name: "work-status"})
		if w.Workers == 0 {
			w.Workers = 8
		}
	})
}

// WorkStatus implements StatusSink: it records the report and returns at
// once. The pending map holds at most one report per Work, so memory is
// bounded by the number of Works.
func (w *StatusWriter) WorkStatus(_ context.Context, cluster, name string, status *flotillav1.WorkStatus) {
	w.init()
	key := client.ObjectKey{Namespace: flotillav1.ClusterNamespace(cluster), Name: name}
	w.mu.Lock()
	w.pending[key] = status
	w.mu.Unlock()
	w.queue.Add(key)
}

// NeedLeaderElection says the writer runs on the leader only.
func (w *StatusWriter) NeedLeaderElection() bool { return true }

// Start runs the workers until ctx ends.
func (w *StatusWriter) Start(ctx context.Context) error {
	w.init()
	var wg sync.WaitGroup
	for range w.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w.next(ctx) {
			}
		}()
	}
	<-ctx.Done()
	w.queue.ShutDown()
	wg.Wait()
	return nil
}

func (w *StatusWriter) next(ctx context.Context) bool {
	key, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(key)
	w.mu.Lock()
	status := w.pending[key]
	delete(w.pending, key)
	w.mu.Unlock()
	if status == nil {
		w.queue.Forget(key)
		return true
	}
	if err := w.write(ctx, key, status); err != nil {
		log.FromContext(ctx).Error(err, "writing Work status", "work", key)
		metrics.WorkStatusWrites.WithLabelValues("error").Inc()
		// Put the report back unless a newer one arrived meanwhile.
		w.mu.Lock()
		if _, newer := w.pending[key]; !newer {
			w.pending[key] = status
		}
		w.mu.Unlock()
		w.queue.AddRateLimited(key)
		return true
	}
	w.queue.Forget(key)
	return true
}

// write applies status to the Work with server-side apply. It skips the
// write when status equals the last one this writer applied to the same
// Work: the cache is not asked, because a cache that has not yet seen the
// previous write could make a needed write look like a no-op, and nothing
// would come back to fix it.
func (w *StatusWriter) write(ctx context.Context, key client.ObjectKey, status *flotillav1.WorkStatus) error {
	work := &flotillav1.Work{}
	if err := w.Reader.Get(ctx, key, work); err != nil {
		if apierrors.IsNotFound(err) {
			w.forget(key)
			return nil
		}
		return err
	}
	w.mu.Lock()
	last := w.written[key]
	w.mu.Unlock()
	if last != nil && last.uid == work.UID && equality.Semantic.DeepEqual(last.status, status) {
		metrics.WorkStatusWrites.WithLabelValues("unchanged").Inc()
		return nil
	}
	desired := status.DeepCopy()
	now := metav1.NewTime(time.Now())
	desired.LastReportTime = &now
	obj := &flotillav1.Work{
		TypeMeta:   metav1.TypeMeta{APIVersion: flotillav1.GroupVersion.String(), Kind: "Work"},
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, UID: work.UID},
		Status:     *desired,
	}
	ac, err := ssa.StatusApplyConfiguration(obj)
	if err != nil {
		return err
	}
	if err := w.Client.SubResource("status").Apply(ctx, ac, client.FieldOwner(flotillav1.FieldOwnerHubStatus), client.ForceOwnership); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) && work.UID != "" {
			// Gone, or replaced by a Work of the same name: its agent
			// reports on the new one.
			w.forget(key)
			return nil
		}
		return err
	}
	w.mu.Lock()
	w.written[key] = &writtenStatus{uid: work.UID, status: status.DeepCopy()}
	w.mu.Unlock()
	metrics.WorkStatusWrites.WithLabelValues("written").Inc()
	return nil
}

func (w *StatusWriter) forget(key client.ObjectKey) {
	w.mu.Lock()
	delete(w.written, key)
	w.mu.Unlock()
}

// writtenStatus is the last status applied to a Work.
type writtenStatus struct {
	uid    types.UID
	status *flotillav1.WorkStatus
}
