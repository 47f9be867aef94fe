package myapp

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/syncbridge"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

// gatedStatus is a client whose Work status patches the test can hold
// (Gate) and refuse, as a slow or refusing apiserver would.
type gatedStatus struct {
	client.Client
	testutil.Gate
	// reject refuses the patches released from the gate as Invalid.
	reject atomic.Bool
}

func (g *gatedStatus) Status() client.SubResourceWriter { return gatedWriter{g.Client.Status(), g} }

type gatedWriter struct {
	client.SubResourceWriter
	g *gatedStatus
}

func (w gatedWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if _, isWork := obj.(*flotillav1.Work); isWork {
		if err := w.g.Pass(ctx); err != nil {
			return err
		}
		if w.g.reject.Load() {
			return apierrors.NewInvalid(flotillav1.GroupVersion.WithKind("Work").GroupKind(), obj.GetName(),
				field.ErrorList{field.Invalid(field.NewPath("status"), "", "refused by the test")})
		}
	}
	return w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// memberReport is what east's agent reports of Work w: its Deployment
// with ready of 2 replicas ready.
func memberReport(w *flotillav1.Work, namespace string, ready int32) *flotillav1.WorkStatus {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	available := metav1.ConditionFalse
	if ready == 2 {
		available = metav1.ConditionTrue
	}
	cond := func(t string, s metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: t, Status: s, Reason: "Test", LastTransitionTime: now, ObservedGeneration: w.Generation}
	}
	return &flotillav1.WorkStatus{
		ObservedGeneration: w.Generation,
		Conditions:         []metav1.Condition{cond(flotillav1.ConditionApplied, metav1.ConditionTrue), cond(flotillav1.ConditionAvailable, available)},
		Manifests: []flotillav1.ManifestStatus{{
			ResourceIdentifier: flotillav1.ResourceIdentifier{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: namespace, Name: "web"},
			Conditions:         []metav1.Condition{cond(flotillav1.ConditionApplied, metav1.ConditionTrue)},
			Workload:           &flotillav1.WorkloadStatus{ObservedGeneration: 1, Generation: 1, Replicas: 2, ReadyReplicas: ready, AvailableReplicas: ready, UpdatedReplicas: 2},
		}},
	}
}

// TestAppStatusRunsAheadOfTheWorkStatusWrite runs the MyApp controller
// with the hub's Work status writer, as the hub does, on a real apiserver,
// with the writer's status patches held by the test: a member's report
// makes the MyApp Ready before its Work status is written, the write then
// lands and the app stays Ready; a later report the apiserver refuses
// shows for as long as its write is in flight and no longer: the app's
// status goes back to what the stored Work says.
func TestAppStatusRunsAheadOfTheWorkStatusWrite(t *testing.T) {
	cfg := sharedEnv.ConfigWithCRDs(t)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, flotillav1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const cluster = "east"
	ns := fmt.Sprintf("reports-%d", time.Now().UnixNano())
	for _, n := range []string{ns, flotillav1.ClusterNamespace(cluster)} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	mc := &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}}
	if err := c.Create(ctx, mc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), mc) })
	meta.SetStatusCondition(&mc.Status.Conditions, metav1.Condition{Type: flotillav1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Test"})
	if err := c.Status().Update(ctx, mc); err != nil {
		t.Fatal(err)
	}

	mgr, err := ctrl.NewManager(cfg, envtestenv.ManagerOptions(scheme))
	if err != nil {
		t.Fatal(err)
	}
	gate := &gatedStatus{Client: mgr.GetClient()}
	writer := &syncbridge.StatusWriter{Client: gate, Reader: mgr.GetCache(), APIReader: mgr.GetAPIReader(), Informers: mgr.GetCache()}
	if err := mgr.Add(writer); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("test"), Reports: writer}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	writer.Notify = r.ReportArrived
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	app := &flotillav1.MyApp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: flotillav1.MyAppSpec{Image: "registry.example.com/team/web:1.0", Replicas: ptr.To[int32](2),
			Placement: flotillav1.Placement{ReplicaScheduling: &flotillav1.ReplicaSchedulingStrategy{ReplicaSchedulingType: flotillav1.ReplicaSchedulingDuplicated}}},
	}
	if err := c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	workKey := client.ObjectKey{Namespace: flotillav1.ClusterNamespace(cluster), Name: flotillav1.WorkName(ns, "web")}
	work := &flotillav1.Work{}
	testutil.Eventually(t, "the app's Work written on the hub", 30*time.Second, func() error { return c.Get(ctx, workKey, work) })
	// The writer drops a report of a Work its cache does not show: wait
	// for the cache.
	testutil.Eventually(t, "the Work in the hub manager's cache", 30*time.Second, func() error { return mgr.GetCache().Get(ctx, workKey, &flotillav1.Work{}) })
	ready := func(want metav1.ConditionStatus) func() error {
		return func() error {
			got := &flotillav1.MyApp{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
				return err
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, flotillav1.ConditionReady)
			if cond == nil || cond.Status != want || cond.ObservedGeneration != got.Generation {
				return fmt.Errorf("MyApp Ready is %+v, want %s", cond, want)
			}
			return nil
		}
	}
	stored := func() *flotillav1.WorkStatus {
		t.Helper()
		got := &flotillav1.Work{}
		if err := c.Get(ctx, workKey, got); err != nil {
			t.Fatal(err)
		}
		return &got.Status
	}
	testutil.Eventually(t, "the MyApp not Ready before any report", 30*time.Second, ready(metav1.ConditionFalse))

	// The member reports its Deployment ready; the write is held.
	release := gate.Hold()
	writer.WorkStatus(ctx, cluster, workKey.Name, memberReport(work, ns, 2))
	testutil.Eventually(t, "the MyApp Ready from the report, its Work status write held", 30*time.Second, ready(metav1.ConditionTrue))
	select {
	case <-gate.Held():
	default:
		t.Fatal("the MyApp went Ready but no Work status write was waiting")
	}
	if st := stored(); st.ObservedGeneration != 0 || len(st.Conditions) != 0 {
		t.Fatalf("the Work status was written before the test released the write: %+v", st)
	}
	release()
	testutil.Eventually(t, "the Work status written after the release", 30*time.Second, func() error {
		if st := stored(); workReady(st) != 2 {
			return fmt.Errorf("the stored Work status has %d ready", workReady(st))
		}
		return nil
	})
	testutil.Consistently(t, "the MyApp Ready once its Work status is written", time.Second, ready(metav1.ConditionTrue))

	// A report the apiserver refuses: the app shows it while its write is
	// in flight, then goes back to what the stored Work says.
	gate.reject.Store(true)
	release = gate.Hold()
	writer.WorkStatus(ctx, cluster, workKey.Name, memberReport(work, ns, 1))
	testutil.Eventually(t, "the MyApp not Ready from the report, its write held", 30*time.Second, ready(metav1.ConditionFalse))
	<-gate.Held()
	release()
	testutil.Eventually(t, "the MyApp Ready again once the apiserver refused the report", 30*time.Second, ready(metav1.ConditionTrue))
	if st := stored(); workReady(st) != 2 {
		t.Fatalf("the refused report reached the stored Work status: %d ready", workReady(st))
	}
}

// workReady is the ready replicas a Work status reports.
func workReady(st *flotillav1.WorkStatus) int32 {
	var n int32
	for _, m := range st.Manifests {
		if m.Workload != nil {
			n += m.Workload.ReadyReplicas
		}
	}
	return n
}
