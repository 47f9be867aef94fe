//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
)

// SpecInput is what every spec gets.
type SpecInput struct {
	// Provider is the running Flotilla.
	Provider ClusterProvider
	// Namespace is the spec's own hub namespace, created for it: its
	// MyApps go there, and their Deployments land in the namespace of the
	// same name in each member. It is emptied and deleted after the spec.
	Namespace string
	// ArtifactsDir is the spec's folder for what it leaves behind when it
	// fails.
	ArtifactsDir string
	// Members are the member names, in order (member-1, member-2, ...).
	Members []string
}

// How long the suite waits. The machine may be small and shared, so they
// are generous bounds, not expectations of speed.
const (
	// convergeTimeout bounds any wait for the fleet to reach a state.
	convergeTimeout = 3 * time.Minute
	// writeTimeout bounds retries of a write to the hub (its webhook is
	// away while the hub restarts, and it fails closed).
	writeTimeout = time.Minute
	// pollInterval is how often a condition is checked.
	pollInterval = 250 * time.Millisecond
)

// The image every spec starts from.
const (
	baseImage     = "registry.example.com/team/web:1.0"
	rolledImage   = "registry.example.com/team/web:1.1"
	overrideImage = "mirror.example.com/team/web:2.0"
)

// newSpecInput creates the spec's namespace in the hub and registers what
// runs when the spec ends: a dump of every cluster into the artifacts
// folder if it failed, then the removal of everything it created (MyApps,
// Works, member Deployments and pods, the namespaces) and a check that
// every member is Ready again, so the next spec finds a healthy fleet.
func newSpecInput(t *testing.T, p ClusterProvider, artifacts, short string) SpecInput {
	t.Helper()
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	in := SpecInput{
		Provider:     p,
		Namespace:    "e2e-" + short + "-" + hex.EncodeToString(suffix),
		ArtifactsDir: filepath.Join(artifacts, sanitize(t.Name())),
		Members:      p.MemberNames(),
	}
	// What an earlier run of this spec left is not this run's.
	_ = os.RemoveAll(in.ArtifactsDir)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: in.Namespace}}
	if err := p.Hub().Create(ctx, ns); err != nil {
		t.Fatalf("creating the spec's namespace %s in the hub: %v", in.Namespace, err)
	}
	t.Logf("spec namespace %s", in.Namespace)
	t.Cleanup(func() {
		dumpIfFailed(t, in, "")
		if err := teardown(ctx, in); err != nil {
			t.Errorf("cleaning up after the spec (namespace %s): %v", in.Namespace, err)
			dumpIfFailed(t, in, "after-cleanup")
		}
	})
	return in
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func sanitize(s string) string { return unsafeChars.ReplaceAllString(s, "_") }

// teardown deletes the spec's MyApps and waits until their Works, member
// Deployments and pods are gone, deletes the namespaces, and waits until
// every member is Ready.
func teardown(ctx context.Context, in SpecInput) error {
	hub := in.Provider.Hub()
	var apps flotillav1.MyAppList
	if err := hub.List(ctx, &apps, client.InNamespace(in.Namespace)); err != nil {
		return fmt.Errorf("listing MyApps: %w", err)
	}
	for i := range apps.Items {
		if err := retryWrite(ctx, func() error { return client.IgnoreNotFound(hub.Delete(ctx, &apps.Items[i])) }); err != nil {
			return fmt.Errorf("deleting MyApp %s: %w", apps.Items[i].Name, err)
		}
	}
	var errs []error
	errs = append(errs, withDiagnosis(ctx, in, poll(ctx, convergeTimeout, func() error {
		if err := hub.List(ctx, &apps, client.InNamespace(in.Namespace)); err != nil {
			return err
		}
		if len(apps.Items) > 0 {
			return fmt.Errorf("%d MyApps left", len(apps.Items))
		}
		works, err := worksOf(ctx, in, "")
		if err != nil {
			return err
		}
		if len(works) > 0 {
			return fmt.Errorf("Works left on the hub: %v", sortedKeys(works))
		}
		return nil
	})))
	errs = append(errs, withDiagnosis(ctx, in, poll(ctx, convergeTimeout, func() error {
		var problems []string
		for _, m := range in.Members {
			c := in.Provider.Member(m)
			var deps appsv1.DeploymentList
			if err := c.List(ctx, &deps, client.InNamespace(in.Namespace)); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", m, err))
				continue
			}
			var pods corev1.PodList
			if err := c.List(ctx, &pods, client.InNamespace(in.Namespace)); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", m, err))
				continue
			}
			if len(deps.Items) > 0 || len(pods.Items) > 0 {
				problems = append(problems, fmt.Sprintf("%s still has %d Deployments and %d pods in %s", m, len(deps.Items), len(pods.Items), in.Namespace))
			}
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		return nil
	})))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: in.Namespace}}
	errs = append(errs, client.IgnoreNotFound(hub.Delete(ctx, ns)))
	for _, m := range in.Members {
		errs = append(errs, client.IgnoreNotFound(in.Provider.Member(m).Delete(ctx, ns.DeepCopy())))
	}
	errs = append(errs, poll(ctx, convergeTimeout, func() error { return membersReady(ctx, in) }))
	return errors.Join(errs...)
}

// withDiagnosis adds to a failed teardown what most often explains
// member objects left behind, so that a CI log that keeps only a failed
// spec's last lines says it: each MemberCluster's PruneBlocked condition
// when it is True, and each member's agent pods that restarted (their
// containers, or in place after a lost Lease).
func withDiagnosis(ctx context.Context, in SpecInput, err error) error {
	if err == nil {
		return nil
	}
	var notes []string
	for _, m := range in.Members {
		mc := &flotillav1.MemberCluster{}
		if gerr := in.Provider.Hub().Get(ctx, client.ObjectKey{Name: m}, mc); gerr == nil {
			if c := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionPruneBlocked); c != nil && c.Status == metav1.ConditionTrue {
				notes = append(notes, fmt.Sprintf("%s PruneBlocked: %s", m, c.Message))
			}
		}
		var pods corev1.PodList
		if lerr := in.Provider.Member(m).List(ctx, &pods, client.InNamespace(systemNamespace)); lerr == nil {
			for _, p := range pods.Items {
				for _, cs := range p.Status.ContainerStatuses {
					if cs.RestartCount > 0 {
						notes = append(notes, fmt.Sprintf("%s pod %s container %s restarted %d times", m, p.Name, cs.Name, cs.RestartCount))
					}
				}
			}
		}
		if lr, ok := in.Provider.(LostLeaseRestarts); ok {
			if counts, lerr := lr.LostLeaseRestarts(ctx, m); lerr == nil {
				for _, pod := range slices.Sorted(maps.Keys(counts)) {
					notes = append(notes, fmt.Sprintf("%s pod %s lost its Lease and started over in place %d times", m, pod, counts[pod]))
				}
			}
		}
	}
	if len(notes) == 0 {
		return fmt.Errorf("%w (no member's prune is held and no agent restarted)", err)
	}
	return fmt.Errorf("%w (%s)", err, strings.Join(notes, "; "))
}

// eventually polls check every pollInterval until it returns nil or
// timeout passes, then fails the test saying what did not converge and the
// last error.
func eventually(t *testing.T, what string, timeout time.Duration, check func() error) {
	t.Helper()
	testutil.Eventually(t, what, timeout, check, testutil.Every(pollInterval))
}

// consistently checks every pollInterval that check keeps returning nil
// for d.
func consistently(t *testing.T, what string, d time.Duration, check func() error) {
	t.Helper()
	testutil.Consistently(t, what, d, check, testutil.Every(pollInterval))
}

// poll runs check every pollInterval until it returns nil, or returns its
// last error once timeout passed (joined with ctx's when ctx ends first).
func poll(ctx context.Context, timeout time.Duration, check func() error) error {
	return testutil.Poll(ctx, timeout, check, testutil.Every(pollInterval))
}

// retryWrite retries a write to the hub for writeTimeout. Refusals that
// retrying won't change (invalid, forbidden) are returned at once; the
// webhook being away is not one: the apiserver reports it as an internal
// error.
func retryWrite(ctx context.Context, write func() error) error {
	deadline := time.Now().Add(writeTimeout)
	for {
		err := write()
		if err == nil || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// newMyApp returns a MyApp of baseImage in the spec's namespace.
func newMyApp(in SpecInput, name string, replicas int32, placement flotillav1.Placement) *flotillav1.MyApp {
	return &flotillav1.MyApp{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: in.Namespace},
		Spec: flotillav1.MyAppSpec{
			Image:     baseImage,
			Replicas:  ptr.To(replicas),
			Placement: placement,
		},
	}
}

// staticWeights is a Divided, Weighted placement with one weight per
// member, in member order.
func staticWeights(members []string, weights ...int64) flotillav1.Placement {
	var list []flotillav1.StaticClusterWeight
	for i, w := range weights {
		list = append(list, flotillav1.StaticClusterWeight{TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{members[i]}}, Weight: w})
	}
	return flotillav1.Placement{ReplicaScheduling: &flotillav1.ReplicaSchedulingStrategy{
		ReplicaSchedulingType:     flotillav1.ReplicaSchedulingDivided,
		ReplicaDivisionPreference: flotillav1.ReplicaDivisionWeighted,
		WeightPreference:          &flotillav1.ClusterPreferences{StaticWeightList: list},
	}}
}

// createMyApp creates app on the hub, retrying while the hub's webhook is
// away, and fails the test if it is refused.
func createMyApp(t *testing.T, in SpecInput, app *flotillav1.MyApp) {
	t.Helper()
	ctx := context.Background()
	err := retryWrite(ctx, func() error { return client.IgnoreAlreadyExists(in.Provider.Hub().Create(ctx, app)) })
	if err != nil {
		t.Fatalf("creating MyApp %s/%s: %v", app.Namespace, app.Name, err)
	}
}

// updateMyApp applies mutate to the MyApp called name and updates it,
// retrying on conflicts and while the webhook is away.
func updateMyApp(t *testing.T, in SpecInput, name string, mutate func(*flotillav1.MyApp)) {
	t.Helper()
	ctx := context.Background()
	err := retryWrite(ctx, func() error {
		app := &flotillav1.MyApp{}
		if err := in.Provider.Hub().Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: name}, app); err != nil {
			return err
		}
		mutate(app)
		return in.Provider.Hub().Update(ctx, app)
	})
	if err != nil {
		t.Fatalf("updating MyApp %s/%s: %v", in.Namespace, name, err)
	}
}

func getMyApp(ctx context.Context, in SpecInput, name string) (*flotillav1.MyApp, error) {
	app := &flotillav1.MyApp{}
	err := in.Provider.Hub().Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: name}, app)
	return app, err
}

// deployWant is what a member's Deployment should look like once rolled
// out.
type deployWant struct {
	replicas int32
	// image is the container image; empty means baseImage.
	image string
	// main names the container that runs image, in a pod of several;
	// empty: the pod has one container.
	main string
}

// want builds the deployWants of replicas per member, with baseImage.
func want(replicas map[string]int32) map[string]deployWant {
	out := map[string]deployWant{}
	for m, r := range replicas {
		out[m] = deployWant{replicas: r}
	}
	return out
}

// deploymentsRolledOut checks that every member in w runs the Deployment
// name in the spec's namespace, owned by Flotilla, with the wanted
// replicas and image, rolled out (observed, updated, ready and available),
// and that every other member runs none.
func deploymentsRolledOut(in SpecInput, name string, w map[string]deployWant) func() error {
	return deploymentsIn(in, in.Members, name, w)
}

// deploymentsIn is deploymentsRolledOut for some members only (the others
// may not answer).
func deploymentsIn(in SpecInput, members []string, name string, w map[string]deployWant) func() error {
	return func() error {
		ctx := context.Background()
		var problems []string
		for _, m := range members {
			d := &appsv1.Deployment{}
			err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: name}, d)
			dw, wanted := w[m]
			switch {
			case !wanted && apierrors.IsNotFound(err):
				continue
			case !wanted && err == nil:
				problems = append(problems, fmt.Sprintf("%s: runs a Deployment (%d replicas) but should not", m, ptr.Deref(d.Spec.Replicas, 1)))
				continue
			case err != nil:
				problems = append(problems, fmt.Sprintf("%s: %v", m, err))
				continue
			}
			if p := rolledOut(d, dw); p != "" {
				problems = append(problems, m+": "+p)
			}
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		return nil
	}
}

// rolledOut says what is not yet as wanted in d ("" when all is).
func rolledOut(d *appsv1.Deployment, w deployWant) string {
	image := w.image
	if image == "" {
		image = baseImage
	}
	var got string
	for i, c := range d.Spec.Template.Spec.Containers {
		if (w.main == "" && i == 0 && len(d.Spec.Template.Spec.Containers) == 1) || (w.main != "" && c.Name == w.main) {
			got = c.Image
		}
	}
	st := d.Status
	switch {
	case d.Labels[flotillav1.LabelWork] == "":
		return "the Deployment does not carry the " + flotillav1.LabelWork + " label"
	case ptr.Deref(d.Spec.Replicas, 1) != w.replicas:
		return fmt.Sprintf("spec.replicas %d, want %d", ptr.Deref(d.Spec.Replicas, 1), w.replicas)
	case got != image:
		return fmt.Sprintf("image %q, want %q", got, image)
	case st.ObservedGeneration != d.Generation:
		return fmt.Sprintf("generation %d not observed yet (observed %d)", d.Generation, st.ObservedGeneration)
	case st.Replicas != w.replicas || st.UpdatedReplicas != w.replicas || st.ReadyReplicas != w.replicas || st.AvailableReplicas != w.replicas:
		return fmt.Sprintf("replicas %d, updated %d, ready %d, available %d, want %d of each", st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas, w.replicas)
	}
	return ""
}

// appReady checks the MyApp's status: the current generation observed,
// Ready True for it, one entry per wanted cluster, Available with the
// wanted replicas assigned and ready, and the totals. Clusters in lost
// were failed over from: their entries say Lost, with nothing assigned,
// until they fail back.
func appReady(in SpecInput, name string, assigned map[string]int32, lost ...string) func() error {
	return func() error {
		app, err := getMyApp(context.Background(), in, name)
		if err != nil {
			return err
		}
		st := app.Status
		if st.ObservedGeneration != app.Generation {
			return fmt.Errorf("status.observedGeneration %d, generation %d", st.ObservedGeneration, app.Generation)
		}
		ready := meta.FindStatusCondition(st.Conditions, flotillav1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != app.Generation {
			return fmt.Errorf("Ready condition %s", conditionString(ready))
		}
		got := map[string]string{}
		var total int32
		for _, c := range st.Clusters {
			got[c.Name] = fmt.Sprintf("%s %d/%d", c.Phase, c.ReadyReplicas, c.Assigned)
		}
		wantEntries := map[string]string{}
		for m, n := range assigned {
			wantEntries[m] = fmt.Sprintf("%s %d/%d", flotillav1.ClusterAppAvailable, n, n)
			total += n
		}
		for _, m := range lost {
			wantEntries[m] = fmt.Sprintf("%s 0/0", flotillav1.ClusterAppLost)
		}
		if fmt.Sprint(got) != fmt.Sprint(wantEntries) {
			return fmt.Errorf("status.clusters %v, want %v", got, wantEntries)
		}
		if st.ReadyReplicas != total || st.DesiredReplicas != total || st.ClusterCount != int32(len(assigned)) {
			return fmt.Errorf("status ready %d, desired %d, clusters %d; want %d, %d, %d", st.ReadyReplicas, st.DesiredReplicas, st.ClusterCount, total, total, len(assigned))
		}
		return nil
	}
}

func conditionString(c *metav1.Condition) string {
	if c == nil {
		return "missing"
	}
	return fmt.Sprintf("%s (reason %s, observedGeneration %d): %s", c.Status, c.Reason, c.ObservedGeneration, c.Message)
}

// placementIs checks that status.placement places replicas per cluster as
// wanted.
func placementIs(in SpecInput, name string, w map[string]int32) func() error {
	return func() error {
		app, err := getMyApp(context.Background(), in, name)
		if err != nil {
			return err
		}
		got := placementOf(app)
		if fmt.Sprint(got) != fmt.Sprint(w) {
			return fmt.Errorf("status.placement.clusters %v, want %v", got, w)
		}
		return nil
	}
}

func placementOf(app *flotillav1.MyApp) map[string]int32 {
	out := map[string]int32{}
	if app.Status.Placement != nil {
		for _, c := range app.Status.Placement.Clusters {
			out[c.Name] = c.Replicas
		}
	}
	return out
}

// worksOf returns the hub's Works by cluster for the MyApp called name in
// the spec's namespace, or for every MyApp there when name is empty,
// leaving out Works being deleted (waiting for their member's
// confirmation).
func worksOf(ctx context.Context, in SpecInput, name string) (map[string]*flotillav1.Work, error) {
	labels := client.MatchingLabels{flotillav1.LabelMyAppNamespace: in.Namespace}
	if name != "" {
		labels[flotillav1.LabelMyAppName] = name
	}
	var list flotillav1.WorkList
	if err := in.Provider.Hub().List(ctx, &list, labels); err != nil {
		return nil, fmt.Errorf("listing Works: %w", err)
	}
	out := map[string]*flotillav1.Work{}
	for i := range list.Items {
		w := &list.Items[i]
		if !w.DeletionTimestamp.IsZero() {
			// Deleted, waiting for its member to confirm (its finalizer):
			// no longer one the app wants.
			continue
		}
		key := w.Labels[flotillav1.LabelCluster]
		if name == "" {
			key = w.Namespace + "/" + w.Name
		}
		out[key] = w
	}
	return out, nil
}

// worksOnlyIn checks that the MyApp's Works are exactly those of clusters.
func worksOnlyIn(in SpecInput, name string, clusters ...string) func() error {
	return func() error {
		works, err := worksOf(context.Background(), in, name)
		if err != nil {
			return err
		}
		got := sortedKeys(works)
		sort.Strings(clusters)
		if fmt.Sprint(got) != fmt.Sprint(clusters) {
			return fmt.Errorf("Works for clusters %v, want %v", got, clusters)
		}
		return nil
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// objectID is an object's identity and spec version: a recreated object
// has a new UID, a changed one a new generation.
type objectID struct {
	UID        types.UID
	Generation int64
}

func (o objectID) String() string { return fmt.Sprintf("uid %s generation %d", o.UID, o.Generation) }

// deploymentIDs returns, per member, the UID and generation of the
// Deployment name in the spec's namespace.
func deploymentIDs(ctx context.Context, in SpecInput, name string, members ...string) (map[string]objectID, error) {
	out := map[string]objectID{}
	for _, m := range members {
		d := &appsv1.Deployment{}
		if err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: name}, d); err != nil {
			return nil, fmt.Errorf("%s: %w", m, err)
		}
		out[m] = objectID{d.UID, d.Generation}
	}
	return out, nil
}

// workIDs returns, per cluster, the UID and generation of the MyApp's Works.
func workIDs(ctx context.Context, in SpecInput, name string) (map[string]objectID, error) {
	works, err := worksOf(ctx, in, name)
	if err != nil {
		return nil, err
	}
	out := map[string]objectID{}
	for c, w := range works {
		out[c] = objectID{w.UID, w.Generation}
	}
	return out, nil
}

// sameUIDs checks that the objects in now kept the UIDs of before (for
// the keys of before); with generations, their generations too.
func sameUIDs(before, now map[string]objectID, generations bool) error {
	var problems []string
	for k, b := range before {
		n, ok := now[k]
		switch {
		case !ok:
			problems = append(problems, k+": gone")
		case n.UID != b.UID:
			problems = append(problems, fmt.Sprintf("%s: recreated (%s, was %s)", k, n, b))
		case generations && n.Generation != b.Generation:
			problems = append(problems, fmt.Sprintf("%s: changed (%s, was %s)", k, n, b))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// membersReady checks that every MemberCluster is Ready and untainted.
func membersReady(ctx context.Context, in SpecInput) error {
	var problems []string
	for _, m := range in.Members {
		if err := memberReady(ctx, in, m); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// memberReady checks that the MemberCluster called name is Ready and
// carries no unreachable taint.
func memberReady(ctx context.Context, in SpecInput, name string) error {
	mc := &flotillav1.MemberCluster{}
	if err := in.Provider.Hub().Get(ctx, client.ObjectKey{Name: name}, mc); err != nil {
		return err
	}
	if c := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		return fmt.Errorf("MemberCluster %s Ready %s", name, conditionString(c))
	}
	for _, taint := range mc.Spec.Taints {
		if taint.Key == flotillav1.TaintClusterUnreachable {
			return fmt.Errorf("MemberCluster %s still tainted %s", name, taint.ToString())
		}
	}
	return nil
}

// leaseHolder returns the holder identity and transitions of a Lease.
func leaseHolder(ctx context.Context, c client.Client, namespace, name string) (string, int32, error) {
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, lease); err != nil {
		return "", 0, err
	}
	return ptr.Deref(lease.Spec.HolderIdentity, ""), ptr.Deref(lease.Spec.LeaseTransitions, 0), nil
}

// membersIn lists the spec's members in mode, in order.
func membersIn(in SpecInput, mode flotillav1.SyncMode) []string {
	var out []string
	for _, m := range in.Members {
		if in.Provider.SyncMode(m) == mode {
			out = append(out, m)
		}
	}
	return out
}

// pullMember is the i-th (from 0) member in Pull mode, for specs that
// kill, pause or restart agents; the spec skips when there is none.
func pullMember(t *testing.T, in SpecInput, i int) string {
	t.Helper()
	pull := membersIn(in, flotillav1.SyncModePull)
	if len(pull) <= i {
		t.Skipf("this spec disturbs agents and needs %d members in Pull mode; Pull: %v of %v", i+1, pull, in.Members)
	}
	return pull[i]
}

// pushMemberOr is the first member in Push mode, or fallback in an
// all-pull fleet.
func pushMemberOr(in SpecInput, fallback string) string {
	if push := membersIn(in, flotillav1.SyncModePush); len(push) > 0 {
		return push[0]
	}
	return fallback
}
