// Package synctest holds the fakes and helpers the sync tests and
// benchmarks share: certificates, an in-memory Work source, recording
// sinks, a map-backed applier, a loopback TCP proxy that can cut
// connections, and a bounded poll.
package synctest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/pkg/sync/client"
	"github.com/flotilla-dev/flotilla/pkg/sync/server"
)

// Eventually polls cond every 10ms until it returns true or timeout
// passes, then fails the test naming what did not converge and cond's last
// explanation. It adapts cond to the module's shared poller.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	testutil.Eventually(t, what, timeout, func() error {
		if ok, why := cond(); !ok {
			return errors.New(why)
		}
		return nil
	}, testutil.Every(10*time.Millisecond))
}

// CheckGoroutines fails the test if, after all its cleanups, more
// goroutines run than before it started. Call it first in a test, so its
// cleanup runs last.
func CheckGoroutines(t testing.TB) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("%d goroutines left behind (%d before, %d after):\n%s", n-before, before, n, buf)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// PKI is a CA with a hub certificate and agent certificates, in a
// temporary directory.
type PKI struct {
	Dir string
	CA  *pki.KeyPair
}

// NewPKI creates a CA and the hub certificate in a test's temporary
// directory.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureHub(dir, ca, nil); err != nil {
		t.Fatal(err)
	}
	return &PKI{Dir: dir, CA: ca}
}

func (p *PKI) path(name string) string { return filepath.Join(p.Dir, name) }

// ServerTLS is the hub's TLS configuration.
func (p *PKI) ServerTLS(t testing.TB) *tls.Config {
	t.Helper()
	cfg, err := pki.ServerTLSConfig(p.path(pki.HubCertFile), p.path(pki.HubKeyFile), p.path(pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// ClientTLSWith writes kp as its cluster's agent certificate (replacing
// what was there) and returns the agent's TLS configuration for it. The
// configuration reads the files again at every handshake, so a later
// ClientTLSWith or WriteFiles of the same cluster changes what a running
// agent presents on its next connection.
func (p *PKI) ClientTLSWith(t testing.TB, kp *pki.KeyPair) *tls.Config {
	t.Helper()
	cluster, err := pki.ClusterFromCertificate(kp.Cert)
	if err != nil {
		t.Fatal(err)
	}
	if err := kp.WriteFiles(p.path(pki.AgentCertFile(cluster)), p.path(pki.AgentKeyFile(cluster))); err != nil {
		t.Fatal(err)
	}
	cfg, err := pki.ClientTLSConfig(p.path(pki.AgentCertFile(cluster)), p.path(pki.AgentKeyFile(cluster)), p.path(pki.CACertFile), "localhost")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// ClientTLS is the TLS configuration of cluster's agent, issuing its
// certificate first if needed.
func (p *PKI) ClientTLS(t testing.TB, cluster string) *tls.Config {
	t.Helper()
	if _, err := pki.EnsureAgent(p.Dir, p.CA, cluster); err != nil {
		t.Fatal(err)
	}
	cfg, err := pki.ClientTLSConfig(p.path(pki.AgentCertFile(cluster)), p.path(pki.AgentKeyFile(cluster)), p.path(pki.CACertFile), "localhost")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// RootPool is the pool holding the CA, as an agent trusts it.
func (p *PKI) RootPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.CA.Cert)
	return pool
}

// Works is an in-memory server.WorkSource. Mutations notify the server
// given to Notify, like the hub's informer handlers do.
type Works struct {
	mu    sync.RWMutex
	works map[string]map[string]*v1alpha1.Work // cluster -> name -> Work
	// intents records how Works vanished: cluster/name -> the
	// deletion-intent annotation's value, "" for none.
	intents map[string]string
	synced  bool
	checks  int
	notify  func(cluster, name string)
	uid     int
}

var _ server.WorkSource = (*Works)(nil)

// NewWorks returns a source that reports itself synced.
func NewWorks() *Works {
	return &Works{works: make(map[string]map[string]*v1alpha1.Work), intents: make(map[string]string), synced: true}
}

// Notify sets the function told about every change (Server.WorkChanged).
func (w *Works) Notify(fn func(cluster, name string)) {
	w.mu.Lock()
	w.notify = fn
	w.mu.Unlock()
}

// SetSynced sets what HasSynced returns.
func (w *Works) SetSynced(synced bool) {
	w.mu.Lock()
	w.synced = synced
	w.mu.Unlock()
}

// HasSynced implements server.WorkSource.
func (w *Works) HasSynced() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checks++
	return w.synced
}

// SyncChecks counts HasSynced calls.
func (w *Works) SyncChecks() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.checks
}

// ListWorks implements server.WorkSource.
func (w *Works) ListWorks(cluster string) ([]*v1alpha1.Work, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make([]*v1alpha1.Work, 0, len(w.works[cluster]))
	for _, wk := range w.works[cluster] {
		out = append(out, wk)
	}
	return out, nil
}

// GetWork implements server.WorkSource.
func (w *Works) GetWork(cluster, name string) (*v1alpha1.Work, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.works[cluster][name], nil
}

// DeletionIntent implements server.WorkSource.
func (w *Works) DeletionIntent(cluster, name string) (string, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	reason, ok := w.intents[cluster+"/"+name]
	return reason, ok
}

// Put creates Work name of cluster with generation 1, or bumps its
// generation and sets its replicas, as the apiserver would on a spec
// change. It returns the stored Work, which must not be modified.
func (w *Works) Put(cluster, name string, replicas int) *v1alpha1.Work {
	return w.PutPadded(cluster, name, replicas, 0)
}

// PutPadded is Put with an annotation of pad bytes, to make messages big.
func (w *Works) PutPadded(cluster, name string, replicas, pad int) *v1alpha1.Work {
	w.mu.Lock()
	m := w.works[cluster]
	if m == nil {
		m = make(map[string]*v1alpha1.Work)
		w.works[cluster] = m
	}
	old := m[name]
	wk := NewWork(cluster, name, replicas)
	if pad > 0 {
		wk.Annotations = map[string]string{"test.flotilla.dev/padding": strings.Repeat("x", pad)}
	}
	if old != nil {
		wk.UID = old.UID
		wk.Generation = old.Generation + 1
	} else {
		w.uid++
		wk.UID = types.UID(fmt.Sprintf("uid-%d", w.uid))
	}
	m[name] = wk
	delete(w.intents, cluster+"/"+name)
	notify := w.notify
	w.mu.Unlock()
	if notify != nil {
		notify(cluster, name)
	}
	return wk
}

// Delete removes Work name of cluster as the MyApp controller does: marked
// with the deletion intent, so its agent deletes what it applied.
func (w *Works) Delete(cluster, name string) { w.remove(cluster, name, "Test") }

// Vanish removes Work name of cluster without the deletion intent, as
// deleting the Work CRD or a hand kubectl delete does, so its agent only
// orphans what it applied.
func (w *Works) Vanish(cluster, name string) { w.remove(cluster, name, "") }

func (w *Works) remove(cluster, name, intent string) {
	w.mu.Lock()
	if _, ok := w.works[cluster][name]; ok {
		w.intents[cluster+"/"+name] = intent
	}
	delete(w.works[cluster], name)
	notify := w.notify
	w.mu.Unlock()
	if notify != nil {
		notify(cluster, name)
	}
}

// Desired returns cluster's Works as name -> generation.
func (w *Works) Desired(cluster string) map[string]int64 {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make(map[string]int64, len(w.works[cluster]))
	for name, wk := range w.works[cluster] {
		out[name] = wk.Generation
	}
	return out
}

// NewWork builds a Work holding one small Deployment.
func NewWork(cluster, name string, replicas int) *v1alpha1.Work {
	deploy := fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":%q,"namespace":"default","labels":{"app":%q}},`+
		`"spec":{"replicas":%d,"selector":{"matchLabels":{"app":%q}},"template":{"metadata":{"labels":{"app":%q}},`+
		`"spec":{"containers":[{"name":"app","image":"registry.example/app:1.0","ports":[{"containerPort":8080}]}]}}}}`,
		name, name, replicas, name, name)
	return &v1alpha1.Work{
		ObjectMeta: metav1.ObjectMeta{
			Name:       name,
			Namespace:  v1alpha1.ClusterNamespace(cluster),
			Generation: 1,
			Labels:     map[string]string{v1alpha1.LabelCluster: cluster},
		},
		Spec: v1alpha1.WorkSpec{Manifests: []v1alpha1.Manifest{{RawExtension: k8sruntime.RawExtension{Raw: []byte(deploy)}}}},
	}
}

// Terminating is a Works that also lists the Works being deleted (held by
// their member-cleanup finalizer), as the hub's source does: a
// server.TerminatingLister. Works itself stays without the method, so the
// other tests' hubs keep their behaviour.
type Terminating struct {
	*Works
	mu    sync.Mutex
	names map[string][]string // cluster -> names, in the order set
}

var (
	_ server.WorkSource        = (*Terminating)(nil)
	_ server.TerminatingLister = (*Terminating)(nil)
)

// NewTerminating wraps w.
func NewTerminating(w *Works) *Terminating {
	return &Terminating{Works: w, names: make(map[string][]string)}
}

// SetTerminating sets the Works of cluster being deleted.
func (t *Terminating) SetTerminating(cluster string, names ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.names[cluster] = slices.Clone(names)
}

// Release drops Work name of cluster from the terminating list, as
// removing its finalizer does.
func (t *Terminating) Release(cluster, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.names[cluster] = slices.DeleteFunc(t.names[cluster], func(n string) bool { return n == name })
}

// TerminatingWorks implements server.TerminatingLister.
func (t *Terminating) TerminatingWorks(cluster string) ([]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.names[cluster]), nil
}

// Deletions is a server.DeletionSink that records every WorkGone as
// "cluster/name", in order. A hook set with OnGone runs inside WorkGone,
// before it is recorded, so a test can check what held when the hub
// heard.
type Deletions struct {
	mu    sync.Mutex
	calls []string
	hook  func(cluster, name string)
}

var _ server.DeletionSink = (*Deletions)(nil)

// NewDeletions returns a sink that has heard nothing.
func NewDeletions() *Deletions { return &Deletions{} }

// OnGone sets a function called on every WorkGone (nil: none).
func (d *Deletions) OnGone(fn func(cluster, name string)) {
	d.mu.Lock()
	d.hook = fn
	d.mu.Unlock()
}

// WorkGone implements server.DeletionSink.
func (d *Deletions) WorkGone(_ context.Context, cluster, name string) {
	d.mu.Lock()
	hook := d.hook
	d.mu.Unlock()
	if hook != nil {
		hook(cluster, name)
	}
	d.mu.Lock()
	d.calls = append(d.calls, cluster+"/"+name)
	d.mu.Unlock()
}

// Calls lists the WorkGone calls as "cluster/name", in order.
func (d *Deletions) Calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.calls)
}

// Clusters is a server.ClusterRegistry (and RevocationChecker) over a
// set of names. Remove and Revoke tell the server given to Notify, like
// the hub's MemberCluster informer handlers do.
type Clusters struct {
	mu      sync.RWMutex
	known   map[string]bool
	revoked map[string]map[string]bool // cluster -> fingerprint
	refused map[string]string          // cluster -> why it is not admitted
	notify  func(cluster string)
}

var (
	_ server.RevocationChecker = (*Clusters)(nil)
	_ server.AdmissionChecker  = (*Clusters)(nil)
)

// Refuse stops admitting cluster, with why as the refusal, as making its
// MemberCluster Pending or Denied does; Refuse(cluster, "") admits it
// again.
func (c *Clusters) Refuse(cluster, why string) {
	c.mu.Lock()
	if why == "" {
		delete(c.refused, cluster)
	} else {
		c.refused[cluster] = why
	}
	c.mu.Unlock()
	c.changed(cluster)
}

// Admitted implements server.AdmissionChecker.
func (c *Clusters) Admitted(_ context.Context, cluster, _ string) (bool, string, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	why, refused := c.refused[cluster]
	return !refused, why, nil
}

// Notify sets the function told about every change (Server.ClusterChanged).
func (c *Clusters) Notify(fn func(cluster string)) {
	c.mu.Lock()
	c.notify = fn
	c.mu.Unlock()
}

func (c *Clusters) changed(cluster string) {
	c.mu.RLock()
	fn := c.notify
	c.mu.RUnlock()
	if fn != nil {
		fn(cluster)
	}
}

// Remove forgets cluster, as deleting its MemberCluster does.
func (c *Clusters) Remove(cluster string) {
	c.mu.Lock()
	delete(c.known, cluster)
	c.mu.Unlock()
	c.changed(cluster)
}

// Revoke revokes the certificate with fingerprint for cluster, as adding
// it to the MemberCluster's spec.revokedCertificates does.
func (c *Clusters) Revoke(cluster, fingerprint string) {
	c.mu.Lock()
	if c.revoked[cluster] == nil {
		c.revoked[cluster] = map[string]bool{}
	}
	c.revoked[cluster][fingerprint] = true
	c.mu.Unlock()
	c.changed(cluster)
}

// Revoked implements server.RevocationChecker.
func (c *Clusters) Revoked(_ context.Context, cluster, fingerprint string) (bool, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.revoked[cluster][fingerprint], nil
}

// NewClusters knows names.
func NewClusters(names ...string) *Clusters {
	c := &Clusters{known: make(map[string]bool), revoked: make(map[string]map[string]bool), refused: make(map[string]string)}
	for _, n := range names {
		c.known[n] = true
	}
	return c
}

// ClusterKnown implements server.ClusterRegistry.
func (c *Clusters) ClusterKnown(_ context.Context, cluster string) (bool, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.known[cluster], nil
}

// Sink records what the server passes on, for both server.StatusSink and
// server.AgentSink.
type Sink struct {
	mu         sync.Mutex
	status     map[string]map[string]*v1alpha1.WorkStatus // cluster -> work -> latest
	reports    int
	heartbeats map[string]int
	connected  map[string]server.AgentInfo
	events     []string // "connect <cluster>" / "disconnect <cluster>" / "refused <cluster>" / "pruned <cluster> <epoch>"
	refusals   map[string]server.Refusal
	blocked    map[string]server.PruneBlocked
	// disconnects is the reason each cluster's last stream ended.
	disconnects map[string]error
}

var (
	_ server.StatusSink = (*Sink)(nil)
	_ server.AgentSink  = (*Sink)(nil)
)

// NewSink returns an empty Sink.
func NewSink() *Sink {
	return &Sink{
		status:     make(map[string]map[string]*v1alpha1.WorkStatus),
		heartbeats: make(map[string]int),
		connected:  make(map[string]server.AgentInfo),
		refusals:   make(map[string]server.Refusal),
		blocked:    make(map[string]server.PruneBlocked),
	}
}

// AgentRefused implements server.AgentSink.
func (s *Sink) AgentRefused(cluster string, r server.Refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refusals[cluster] = r
	s.events = append(s.events, "refused "+cluster)
}

// AgentPruneBlocked implements server.AgentSink.
func (s *Sink) AgentPruneBlocked(cluster string, b server.PruneBlocked) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blocked[cluster] = b
}

// AgentPruned implements server.AgentSink.
func (s *Sink) AgentPruned(cluster string, epoch uint64, confirmed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.blocked, cluster)
	s.events = append(s.events, fmt.Sprintf("pruned %s confirmed=%v", cluster, confirmed))
}

// Refusal returns the last refusal by an agent of cluster.
func (s *Sink) Refusal(cluster string) (server.Refusal, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.refusals[cluster]
	return r, ok
}

// PruneBlocked returns the prune cluster's agent holds, if any.
func (s *Sink) PruneBlocked(cluster string) (server.PruneBlocked, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blocked[cluster]
	return b, ok
}

// WorkStatus implements server.StatusSink.
func (s *Sink) WorkStatus(_ context.Context, cluster, name string, st *v1alpha1.WorkStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status[cluster] == nil {
		s.status[cluster] = make(map[string]*v1alpha1.WorkStatus)
	}
	s.status[cluster][name] = st
	s.reports++
}

// AgentConnected implements server.AgentSink.
func (s *Sink) AgentConnected(cluster string, info server.AgentInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.connected[cluster] = info
	s.events = append(s.events, "connect "+cluster)
}

// AgentHeartbeat implements server.AgentSink.
func (s *Sink) AgentHeartbeat(cluster string, _ server.Heartbeat) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heartbeats[cluster]++
}

// AgentDisconnected implements server.AgentSink.
func (s *Sink) AgentDisconnected(cluster string, reason error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.connected, cluster)
	s.events = append(s.events, "disconnect "+cluster)
	if s.disconnects == nil {
		s.disconnects = make(map[string]error)
	}
	s.disconnects[cluster] = reason
}

// DisconnectReason is why cluster's last stream ended, as the server told
// AgentDisconnected; ok is false when none has ended.
func (s *Sink) DisconnectReason(cluster string) (reason error, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reason, ok = s.disconnects[cluster]
	return reason, ok
}

// Status returns the latest status reported for a Work.
func (s *Sink) Status(cluster, name string) *v1alpha1.WorkStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status[cluster][name]
}

// Connected returns the info of cluster's connected agent.
func (s *Sink) Connected(cluster string) (server.AgentInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	info, ok := s.connected[cluster]
	return info, ok
}

// Heartbeats counts cluster's heartbeats.
func (s *Sink) Heartbeats(cluster string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heartbeats[cluster]
}

// Events lists connects and disconnects in order.
func (s *Sink) Events() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// Applier is a client.Applier over a map. It counts every call, can be
// made to block, and reports status for each Work it applies, as the real
// agent does.
type Applier struct {
	mu        sync.Mutex
	held      map[string]*v1alpha1.Work
	applies   map[string]int // "name@generation (uid u)" -> times applied
	calls     int
	deletes   int
	orphans   int
	snapshots int
	gate      chan struct{} // when non-nil, every call waits for it to close
	stalled   int           // calls waiting at the gate now
	log       []string      // "apply name@gen", "delete name", "orphan name", "snapshot n"
	failNext  int           // fail this many more Apply calls
	// failPrune makes SnapshotComplete fail while set; pruneFailures
	// counts the calls that failed.
	failPrune     bool
	pruneFailures int
	// failDelete makes Delete fail while set; deleteFailures counts the
	// calls that failed.
	failDelete     bool
	deleteFailures int
	// brake, when above zero, holds an unconfirmed prune that would
	// delete more than brake Works, as pkg/apply's deletion brake does.
	brake  int
	report func(name string, st *v1alpha1.WorkStatus)
}

var _ client.Applier = (*Applier)(nil)

// NewApplier returns an Applier holding nothing.
func NewApplier() *Applier {
	return &Applier{held: make(map[string]*v1alpha1.Work), applies: make(map[string]int)}
}

// ReportTo makes the applier report a status for every Work it applies.
func (a *Applier) ReportTo(fn func(name string, st *v1alpha1.WorkStatus)) {
	a.mu.Lock()
	a.report = fn
	a.mu.Unlock()
}

// FailApplies makes the next n Apply calls fail.
func (a *Applier) FailApplies(n int) {
	a.mu.Lock()
	a.failNext = n
	a.mu.Unlock()
}

// FailPrunes makes every SnapshotComplete call fail while fail is set, as
// an object the member refuses to delete would.
func (a *Applier) FailPrunes(fail bool) {
	a.mu.Lock()
	a.failPrune = fail
	a.mu.Unlock()
}

// PruneFailures counts the SnapshotComplete calls that failed.
func (a *Applier) PruneFailures() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pruneFailures
}

// FailDeletes makes every Delete call fail while fail is set, as an
// object the member refuses to delete would; the Work stays held.
func (a *Applier) FailDeletes(fail bool) {
	a.mu.Lock()
	a.failDelete = fail
	a.mu.Unlock()
}

// DeleteFailures counts the Delete calls that failed.
func (a *Applier) DeleteFailures() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.deleteFailures
}

// Brake makes SnapshotComplete refuse, with a *client.PruneBlockedError,
// an unconfirmed prune that would delete more than max Works.
func (a *Applier) Brake(max int) {
	a.mu.Lock()
	a.brake = max
	a.mu.Unlock()
}

// Stall makes every call block until Release (or its context ends).
func (a *Applier) Stall() {
	a.mu.Lock()
	a.gate = make(chan struct{})
	a.mu.Unlock()
}

// Release lets stalled calls through.
func (a *Applier) Release() {
	a.mu.Lock()
	if a.gate != nil {
		close(a.gate)
		a.gate = nil
	}
	a.mu.Unlock()
}

// Stalled is how many calls wait at the gate now.
func (a *Applier) Stalled() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stalled
}

func (a *Applier) wait(ctx context.Context) error {
	a.mu.Lock()
	gate := a.gate
	if gate != nil {
		a.stalled++
	}
	a.mu.Unlock()
	if gate == nil {
		return nil
	}
	defer func() {
		a.mu.Lock()
		a.stalled--
		a.mu.Unlock()
	}()
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Held implements client.Applier.
func (a *Applier) Held(context.Context) ([]client.HeldWork, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]client.HeldWork, 0, len(a.held))
	for _, w := range a.held {
		out = append(out, client.HeldWork{Name: w.Name, UID: string(w.UID), Generation: w.Generation})
	}
	return out, nil
}

// Apply implements client.Applier.
func (a *Applier) Apply(ctx context.Context, w *v1alpha1.Work) error {
	if err := a.wait(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	if a.failNext > 0 {
		a.failNext--
		a.mu.Unlock()
		return fmt.Errorf("injected failure applying %s", w.Name)
	}
	a.held[w.Name] = w
	a.applies[fmt.Sprintf("%s@%d (uid %s)", w.Name, w.Generation, w.UID)]++
	a.calls++
	a.log = append(a.log, fmt.Sprintf("apply %s@%d", w.Name, w.Generation))
	report := a.report
	a.mu.Unlock()
	if report != nil {
		report(w.Name, &v1alpha1.WorkStatus{
			ObservedGeneration: w.Generation,
			Conditions: []metav1.Condition{{
				Type: v1alpha1.ConditionApplied, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonApplied,
				ObservedGeneration: w.Generation, LastTransitionTime: metav1.Unix(1, 0),
			}},
		})
	}
	return nil
}

// Delete implements client.Applier.
func (a *Applier) Delete(ctx context.Context, name string) error {
	if err := a.wait(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failDelete {
		a.deleteFailures++
		return fmt.Errorf("injected failure deleting %s", name)
	}
	delete(a.held, name)
	a.deletes++
	a.log = append(a.log, "delete "+name)
	return nil
}

// Orphan implements client.Applier: it forgets Work name, as if its
// objects were left running unrecorded.
func (a *Applier) Orphan(ctx context.Context, name string) error {
	if err := a.wait(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.held, name)
	a.orphans++
	a.log = append(a.log, "orphan "+name)
	return nil
}

// Orphans counts the Orphan calls that went through.
func (a *Applier) Orphans() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.orphans
}

// SnapshotComplete implements client.Applier.
func (a *Applier) SnapshotComplete(ctx context.Context, keep []string, confirmed bool) error {
	if err := a.wait(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failPrune {
		a.pruneFailures++
		return fmt.Errorf("injected failure pruning to %d Works", len(keep))
	}
	want := make(map[string]bool, len(keep))
	for _, n := range keep {
		want[n] = true
	}
	var gone []string
	for name := range a.held {
		if !want[name] {
			gone = append(gone, name)
		}
	}
	slices.Sort(gone)
	if a.brake > 0 && !confirmed && len(gone) > a.brake {
		a.log = append(a.log, fmt.Sprintf("brake %d", len(gone)))
		return fmt.Errorf("pruning: %w", &client.PruneBlockedError{WouldDelete: len(gone), Held: len(a.held), Works: gone})
	}
	for _, name := range gone {
		delete(a.held, name)
	}
	a.snapshots++
	if confirmed {
		a.log = append(a.log, fmt.Sprintf("confirmed snapshot %d", len(keep)))
	} else {
		a.log = append(a.log, fmt.Sprintf("snapshot %d", len(keep)))
	}
	return nil
}

// Seed makes the applier hold w, as if an earlier run had applied it.
func (a *Applier) Seed(w *v1alpha1.Work) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held[w.Name] = w
}

// HeldGenerations returns what it holds as name -> generation.
func (a *Applier) HeldGenerations() map[string]int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]int64, len(a.held))
	for name, w := range a.held {
		out[name] = w.Generation
	}
	return out
}

// Log lists the calls that went through, in order.
func (a *Applier) Log() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.log)
}

// Applies returns how often each "name@generation (uid u)" was applied.
func (a *Applier) Applies() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]int, len(a.applies))
	for k, v := range a.applies {
		out[k] = v
	}
	return out
}

// Counts returns the number of Apply, Delete and SnapshotComplete calls
// that went through.
func (a *Applier) Counts() (applies, deletes, snapshots int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls, a.deletes, a.snapshots
}

// Diff describes how got differs from want, or returns "" when they are
// equal.
func Diff(want, got map[string]int64) string {
	var diffs []string
	for name, g := range want {
		if h, ok := got[name]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s missing (want gen %d)", name, g))
		} else if h != g {
			diffs = append(diffs, fmt.Sprintf("%s at gen %d, want %d", name, h, g))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			diffs = append(diffs, name+" should be gone")
		}
	}
	slices.Sort(diffs)
	if len(diffs) > 5 {
		diffs = append(diffs[:5], fmt.Sprintf("and %d more", len(diffs)-5))
	}
	return strings.Join(diffs, "; ")
}

// Identity is an in-memory client.Identity, standing in for the agent's
// identity ConfigMap: it follows client.DecideIdentity.
type Identity struct {
	mu       sync.Mutex
	recorded *client.FleetRecord
	accept   string
}

var _ client.Identity = (*Identity)(nil)

// Admit implements client.Identity.
func (i *Identity) Admit(_ context.Context, fleetID, cluster string) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	offered := client.FleetRecord{FleetID: fleetID, Cluster: cluster}
	write, err := client.DecideIdentity(i.recorded, offered, i.accept)
	if err != nil {
		return err
	}
	if write {
		i.recorded = &offered
		i.accept = ""
	}
	return nil
}

// Record sets the record, as an earlier run would have.
func (i *Identity) Record(fleetID, cluster string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.recorded = &client.FleetRecord{FleetID: fleetID, Cluster: cluster}
}

// Accept re-points the agent on purpose, like --accept-fleet-id.
func (i *Identity) Accept(fleetID string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.accept = fleetID
}

// Recorded returns the record, nil when there is none.
func (i *Identity) Recorded() *client.FleetRecord {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.recorded == nil {
		return nil
	}
	r := *i.recorded
	return &r
}

// Proxy forwards TCP connections on loopback to a target and can cut them
// all at once, as a network failure would.
type Proxy struct {
	lis    net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy starts a proxy to target, stopped in t.Cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{lis: lis, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.serve)
	t.Cleanup(p.Close)
	return p
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

func (p *Proxy) serve() {
	for {
		in, err := p.lis.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		p.wg.Go(func() { pipe(out, in) })
		p.wg.Go(func() { pipe(in, out) })
	}
}

// Cut closes every connection going through the proxy now; new ones are
// still accepted.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns)
	for c := range p.conns {
		c.Close()
	}
	return n / 2
}

// Close stops the proxy and waits for its goroutines.
func (p *Proxy) Close() {
	p.lis.Close()
	p.Cut()
	p.wg.Wait()
}
