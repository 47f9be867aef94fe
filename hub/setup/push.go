package setup

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/controllers/membercluster"
	"github.com/flotilla-dev/flotilla/hub/internal/push"
	"github.com/flotilla-dev/flotilla/hub/internal/syncbridge"
)

// setupPush adds push mode: a multicluster-runtime manager over mgr whose
// provider engages the Push MemberClusters, and the engine that applies
// their Works. Both run on the leader only.
func setupPush(ctx context.Context, mgr ctrl.Manager, opts Options, scheme *runtime.Scheme, hub *Hub, source *syncbridge.WorkSource, fence func(context.Context) error) (*push.Engine, error) {
	log := opts.Logger.WithName("push")
	provider := &push.Provider{
		Hub:       mgr.GetCache(),
		Secrets:   mgr.GetAPIReader(),
		Namespace: hubNamespace(opts),
		Scheme:    scheme,
		Problems:  hub.Tracker,
		Resync:    opts.PushResync,
		Log:       log,
	}
	mcMgr, err := mcmanager.WithMultiCluster(mgr, provider)
	if err != nil {
		return nil, err
	}
	registerer := opts.Registerer
	if registerer == nil {
		registerer = ctrlmetrics.Registry
	}
	metrics, err := push.NewMetrics(registerer)
	if err != nil {
		return nil, err
	}
	instance := os.Getenv("POD_NAME")
	if instance == "" {
		instance, _ = os.Hostname()
	}
	engine := &push.Engine{
		Works:     source,
		Health:    hub.Tracker,
		Status:    hub.StatusWriter,
		Deletions: &syncbridge.Finalizer{Client: mgr.GetClient(), Reader: mgr.GetCache(), APIReader: mgr.GetAPIReader()},
		FleetID: func(ctx context.Context) (string, error) {
			return ensureFleetID(ctx, mgr.GetAPIReader(), mgr.GetClient(), hubNamespace(opts))
		},
		Fence:  fence,
		Scheme: scheme,
		PrometheusURL: func(ctx context.Context, member string) (string, error) {
			mc := &flotillav1.MemberCluster{}
			if err := mgr.GetClient().Get(ctx, client.ObjectKey{Name: member}, mc); err != nil {
				return "", fmt.Errorf("reading MemberCluster %s for its Prometheus URL: %w", member, err)
			}
			if mc.Spec.Push == nil {
				return "", nil
			}
			return mc.Spec.Push.PrometheusURL, nil
		},
		Version:            Version,
		Instance:           instance,
		HeartbeatInterval:  opts.PushHeartbeatInterval,
		DeleteRate:         opts.MemberDeleteRate,
		DeleteBurst:        opts.MemberDeleteBurst,
		Metrics:            metrics,
		SkipNameValidation: opts.SkipNameValidation,
		OnLost:             provider.Disengage,
		Log:                log,
	}
	if err := engine.SetupWithManager(mcMgr, source.Notify); err != nil {
		return nil, err
	}
	// mcmanager's Start would add the provider; the hub starts the plain
	// manager (tests do too), so it is added here, as a leader-election
	// runnable like the rest.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return provider.Start(ctx, mcMgr) })); err != nil {
		return nil, err
	}
	if err := syncbridge.WatchClusters(ctx, mgr.GetCache(), func(string) { provider.Wake() }); err != nil {
		return nil, err
	}
	return engine, nil
}

// prunes sends an admin's prune confirmation to whichever serves the
// member: the push engine for a Push member, the sync server otherwise.
type prunes struct {
	engine *push.Engine
	sync   membercluster.PruneConfirmer
}

func (p prunes) ConfirmPrune(cluster string, epoch uint64) bool {
	if p.engine != nil && p.engine.Serves(cluster) {
		return p.engine.ConfirmPrune(cluster, epoch)
	}
	if p.sync != nil {
		return p.sync.ConfirmPrune(cluster, epoch)
	}
	return false
}

// DefaultPushResync is how often the hub rereads every Push member's
// kubeconfig Secret by default.
const DefaultPushResync = 5 * time.Second
