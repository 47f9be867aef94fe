package push

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/memberprobe"
)

// Problems is told when the hub cannot push to a member at all (the
// membercluster Tracker's PushUnavailable).
type Problems interface {
	PushUnavailable(cluster, reason, message string)
}

// The kubeconfig Secrets are read by name in the hub's own namespace; the
// hub has no list or watch on Secrets.
//
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get,namespace=flotilla-system

// Provider is a multicluster-runtime provider that engages exactly the
// Push MemberClusters, from their kubeconfig Secrets.
type Provider struct {
	// Hub reads MemberClusters (the hub manager's cache).
	Hub client.Reader
	// Secrets reads the kubeconfig Secrets live, by name.
	Secrets client.Reader
	// Namespace is the hub's namespace, where the Secrets are.
	Namespace string
	// Scheme is the member clusters' scheme.
	Scheme *runtime.Scheme
	// Problems hears of Secrets the hub cannot use.
	Problems Problems
	// Resync is how often every Push member's Secret is read again
	// (default 5s); a MemberCluster change (Wake) reads at once.
	Resync time.Duration
	// ConnectTimeout bounds the wait for a new member cluster's cache
	// (default 30s); an unreachable member is tried again at the next
	// resync.
	ConnectTimeout time.Duration
	Log            logr.Logger

	clusters *registry
	once     sync.Once
	wake     chan struct{}

	mu sync.Mutex
	// engaged is the kubeconfig hash each engaged (or engaging) member
	// runs with.
	engaged  map[string]string
	engaging map[string]bool
	// want is the kubeconfig hash the last sync asked for, per member.
	want map[string]string
}

// Disengage ends member's engagement now (its apiserver was lost); the
// provider engages it again once its apiserver answers (see engage).
func (p *Provider) Disengage(member string) {
	p.init()
	p.clusters.remove(multicluster.ClusterName(member))
	p.mu.Lock()
	delete(p.engaged, member)
	p.mu.Unlock()
	p.Wake()
}

var (
	_ multicluster.Provider         = (*Provider)(nil)
	_ multicluster.ProviderRunnable = (*Provider)(nil)
)

func (p *Provider) init() {
	p.once.Do(func() {
		timeout := p.ConnectTimeout
		if timeout <= 0 {
			timeout = 30 * time.Second
		}
		p.clusters = newRegistry(timeout, func(err error, msg string, kv ...any) { p.Log.Error(err, msg, kv...) })
		p.wake = make(chan struct{}, 1)
		p.engaged = map[string]string{}
		p.engaging = map[string]bool{}
		p.want = map[string]string{}
	})
}

// Get implements multicluster.Provider.
func (p *Provider) Get(ctx context.Context, name multicluster.ClusterName) (cluster.Cluster, error) {
	p.init()
	return p.clusters.get(name)
}

// IndexField implements multicluster.Provider.
func (p *Provider) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	p.init()
	return p.clusters.indexField(ctx, obj, field, extract)
}

// Wake makes the provider look at the MemberClusters now (a MemberCluster
// changed). It never blocks.
func (p *Provider) Wake() {
	p.init()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Start implements multicluster.ProviderRunnable: it engages and
// disengages members until ctx ends.
func (p *Provider) Start(ctx context.Context, aware multicluster.Aware) error {
	p.init()
	resync := p.Resync
	if resync <= 0 {
		resync = 5 * time.Second
	}
	for {
		if err := p.sync(ctx, aware); err != nil && ctx.Err() == nil {
			p.Log.Error(err, "looking at the Push members; trying again", "in", resync.String())
		}
		select {
		case <-ctx.Done():
			for _, name := range p.clusters.names() {
				p.clusters.remove(name)
			}
			return nil
		case <-p.wake:
		case <-time.After(resync):
		}
	}
}

// sync engages every Push member with a usable Secret and disengages the
// others.
func (p *Provider) sync(ctx context.Context, aware multicluster.Aware) error {
	var list flotillav1.MemberClusterList
	if err := p.Hub.List(ctx, &list); err != nil {
		return fmt.Errorf("listing MemberClusters: %w", err)
	}
	want := map[string]bool{}
	hashes := map[string]string{}
	defer func() {
		p.mu.Lock()
		p.want = hashes
		p.mu.Unlock()
	}()
	for i := range list.Items {
		mc := &list.Items[i]
		if !mc.IsPush() || !mc.IsAccepted() {
			continue
		}
		cfg, hash, err := p.kubeconfig(ctx, mc)
		var invalid *invalidSecretError
		switch {
		case errors.As(err, &invalid):
			p.Problems.PushUnavailable(mc.Name, flotillav1.ReasonKubeconfigInvalid, invalid.Error())
			continue
		case err != nil:
			// Could not read the Secret (the hub apiserver): keep what
			// runs, try again.
			p.Log.Error(err, "reading a Push member's kubeconfig Secret", "member", mc.Name)
			want[mc.Name] = true
			continue
		}
		want[mc.Name] = true
		hashes[mc.Name] = hash
		p.mu.Lock()
		p.want[mc.Name] = hash
		same := p.engaged[mc.Name] == hash
		busy := p.engaging[mc.Name]
		if !same && !busy {
			p.engaging[mc.Name] = true
		}
		p.mu.Unlock()
		if same || busy {
			continue
		}
		go p.engage(ctx, aware, mc.Name, cfg, hash)
	}
	for _, name := range p.clusters.names() {
		if !want[string(name)] {
			p.Log.Info("disengaging a member: no longer a usable Push member", "member", name)
			p.clusters.remove(name)
			p.mu.Lock()
			delete(p.engaged, string(name))
			p.mu.Unlock()
		}
	}
	return nil
}

// engage (re)engages member with cfg. It may wait for the member's cache,
// so it runs on its own goroutine, one per member at a time.
func (p *Provider) engage(ctx context.Context, aware multicluster.Aware, member string, cfg *rest.Config, hash string) {
	defer func() {
		p.mu.Lock()
		delete(p.engaging, member)
		p.mu.Unlock()
	}()
	// Engage only a member that answers: an engagement's caches are
	// started once, and against a dead apiserver their reflectors back off
	// (up to 30 s) and would lag behind the member once it is back. Ask
	// every second, so a member that returns is engaged within about one.
	check, err := memberprobe.Readyz(cfg)
	if err != nil {
		p.Problems.PushUnavailable(member, flotillav1.ReasonKubeconfigInvalid, fmt.Sprintf("the kubeconfig for Push member %s cannot be used: %v", member, err))
		return
	}
	for {
		err := check(ctx)
		if err == nil {
			break
		}
		if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
			p.Problems.PushUnavailable(member, flotillav1.ReasonKubeconfigInvalid, fmt.Sprintf("Push member %s refuses the kubeconfig's credentials (spec.push.kubeconfigSecretRef): %v", member, err))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		if !p.wanted(member, hash) {
			return
		}
	}
	// /readyz answers anyone; a request that needs the credentials tells
	// a refused token or certificate apart from an outage.
	if err := p.authorized(ctx, cfg); err != nil {
		p.Problems.PushUnavailable(member, flotillav1.ReasonKubeconfigInvalid, fmt.Sprintf("Push member %s refuses the kubeconfig's credentials (spec.push.kubeconfigSecretRef): %v", member, err))
		return
	}
	cl, err := p.newCluster(cfg)
	if err != nil {
		if ctx.Err() == nil {
			p.Log.Info("could not build a Push member's client yet; trying again", "member", member, "error", err.Error())
		}
		return
	}
	name := multicluster.ClusterName(member)
	p.clusters.remove(name)
	p.mu.Lock()
	delete(p.engaged, member)
	p.mu.Unlock()
	if err := p.clusters.add(ctx, name, cl, aware); err != nil {
		if ctx.Err() == nil {
			p.Log.Info("could not engage a Push member yet; trying again", "member", member, "error", err.Error())
		}
		return
	}
	p.mu.Lock()
	p.engaged[member] = hash
	p.mu.Unlock()
	p.Log.Info("engaged a Push member", "member", member, "server", cfg.Host)
}

// authorized lists one Deployment with cfg: an Unauthorized or Forbidden
// answer is an error (a failure of another kind is not, and shows later).
func (p *Provider) authorized(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_, err = cs.AppsV1().Deployments("").List(ctx, metav1.ListOptions{Limit: 1})
	if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
		return err
	}
	return nil
}

// wanted says whether member's last sync still asked for hash (a changed
// Secret or a member no longer Push stops a waiting engage).
func (p *Provider) wanted(member, hash string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.want[member] == hash
}

// newCluster builds a controller-runtime cluster for a member whose cache
// holds only the Deployments Flotilla applied.
func (p *Provider) newCluster(cfg *rest.Config) (cluster.Cluster, error) {
	owned, err := labels.NewRequirement(flotillav1.LabelWork, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	dependency, err := labels.NewRequirement(flotillav1.LabelDependency, selection.Equals, []string{"true"})
	if err != nil {
		return nil, err
	}
	return cluster.New(cfg, func(o *cluster.Options) {
		o.Scheme = p.Scheme
		o.Logger = p.Log
		o.Cache.ByObject = map[client.Object]cache.ByObject{
			&appsv1.Deployment{}: {Label: labels.NewSelector().Add(*owned)},
			&corev1.Service{}:    {Label: labels.NewSelector().Add(*owned)},
			// Dependencies carry no Work label (several Works share one).
			&corev1.ConfigMap{}:      {Label: labels.NewSelector().Add(*dependency)},
			&corev1.Secret{}:         {Label: labels.NewSelector().Add(*dependency)},
			&corev1.ServiceAccount{}: {Label: labels.NewSelector().Add(*dependency)},
			// A Service's EndpointSlices carry its labels.
			&discoveryv1.EndpointSlice{}: {Label: labels.NewSelector().Add(*owned)},
		}
	})
}

// invalidSecretError is a kubeconfig Secret the hub cannot use; its
// message names the Secret.
type invalidSecretError struct{ msg string }

func (e *invalidSecretError) Error() string { return e.msg }

// kubeconfig reads mc's Secret and returns its client config and a hash
// of the kubeconfig.
func (p *Provider) kubeconfig(ctx context.Context, mc *flotillav1.MemberCluster) (*rest.Config, string, error) {
	if mc.Spec.Push == nil || mc.Spec.Push.KubeconfigSecretRef.Name == "" {
		return nil, "", &invalidSecretError{fmt.Sprintf("spec.push.kubeconfigSecretRef is not set: name the Secret in %s that holds the member's kubeconfig", p.Namespace)}
	}
	ref := mc.Spec.Push.KubeconfigSecretRef
	key := ref.Key
	if key == "" {
		key = flotillav1.DefaultKubeconfigKey
	}
	where := fmt.Sprintf("Secret %s/%s", p.Namespace, ref.Name)
	s := &corev1.Secret{}
	if err := p.Secrets.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: ref.Name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", &invalidSecretError{fmt.Sprintf("%s (spec.push.kubeconfigSecretRef) does not exist", where)}
		}
		return nil, "", fmt.Errorf("reading %s: %w", where, err)
	}
	raw, ok := s.Data[key]
	if !ok || len(raw) == 0 {
		return nil, "", &invalidSecretError{fmt.Sprintf("%s has no key %q (spec.push.kubeconfigSecretRef.key)", where, key)}
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		return nil, "", &invalidSecretError{fmt.Sprintf("%s key %q holds no usable kubeconfig: %v", where, key, err)}
	}
	if cfg.Host == "" {
		return nil, "", &invalidSecretError{fmt.Sprintf("%s key %q: the kubeconfig's current context names no server", where, key)}
	}
	if cfg.Insecure {
		return nil, "", &invalidSecretError{fmt.Sprintf("%s key %q: the kubeconfig skips TLS verification (insecure-skip-tls-verify); give the member's CA instead", where, key)}
	}
	// The member's apiserver should not be throttled by client-go's
	// default 5 QPS: a failover writes many Works at once.
	cfg.QPS, cfg.Burst = 50, 100
	sum := sha256.Sum256(raw)
	return cfg, fmt.Sprintf("%x", sum[:8]), nil
}
