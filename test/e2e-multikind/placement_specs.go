//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// requireMembers fails the spec when the fleet has fewer than n members.
func requireMembers(t *testing.T, in SpecInput, n int) {
	t.Helper()
	if len(in.Members) < n {
		t.Fatalf("this spec needs %d members, the fleet has %v", n, in.Members)
	}
}

func duplicated() flotillav1.Placement {
	return flotillav1.Placement{ReplicaScheduling: &flotillav1.ReplicaSchedulingStrategy{
		ReplicaSchedulingType: flotillav1.ReplicaSchedulingDuplicated,
	}}
}

// each returns n replicas for every member.
func each(members []string, n int32) map[string]int32 {
	out := map[string]int32{}
	for _, m := range members {
		out[m] = n
	}
	return out
}

// DuplicatedSpec: a Duplicated MyApp of 2 replicas gets one Work per
// member on the hub, a Deployment with 2 ready replicas in every member,
// and a Ready status with every cluster Available. Then the Deployment in
// each of handEdited is edited by hand (replicas and image, by another
// field manager, as `kubectl edit` would): whoever applies that member's
// Works (its agent, or the hub for a Push member) reverts the edit on the
// same object, and the MyApp is Ready again.
func DuplicatedSpec(t *testing.T, in SpecInput, handEdited ...string) {
	ctx := context.Background()
	createMyApp(t, in, newMyApp(in, "web", 2, duplicated()))
	w := each(in.Members, 2)
	eventually(t, "one Work per member for MyApp web", convergeTimeout, worksOnlyIn(in, "web", in.Members...))
	eventually(t, "Deployment web with 2 ready replicas in every member", convergeTimeout, deploymentsRolledOut(in, "web", want(w)))
	eventually(t, "MyApp web Ready with 2/2 replicas in every member", convergeTimeout, appReady(in, "web", w))
	if len(handEdited) == 0 {
		return
	}
	before, err := deploymentIDs(ctx, in, "web", handEdited...)
	if err != nil {
		t.Fatal(err)
	}
	const editedImage = "registry.example.com/someone/else:9.9"
	edit := client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/replicas","value":4},`+
		`{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"`+editedImage+`"}]`))
	for _, m := range handEdited {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: in.Namespace, Name: "web"}}
		if err := in.Provider.Member(m).Patch(ctx, d, edit, client.FieldOwner("kubectl-edit")); err != nil {
			t.Fatalf("editing %s's Deployment web by hand: %v", m, err)
		}
		if ptr.Deref(d.Spec.Replicas, 0) != 4 || d.Generation == before[m].Generation {
			t.Fatalf("%s's Deployment web after the hand edit: replicas %d, generation %d (was %d)", m, ptr.Deref(d.Spec.Replicas, 0), d.Generation, before[m].Generation)
		}
		t.Logf("edited %s's (syncMode %s) Deployment web by hand: 4 replicas of %s, generation %d", m, in.Provider.SyncMode(m), editedImage, d.Generation)
	}
	eventually(t, "the hand edits reverted: 2 ready replicas of "+baseImage+" in every member", convergeTimeout, deploymentsRolledOut(in, "web", want(w)))
	after, err := deploymentIDs(ctx, in, "web", handEdited...)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameUIDs(before, after, false); err != nil {
		t.Fatalf("reverting the hand edits recreated Deployments: %v", err)
	}
	eventually(t, "MyApp web Ready again after the hand edits", convergeTimeout, appReady(in, "web", w))
}

// DividedStaticSpec: 12 replicas Divided by static weights 1:2:3 are
// placed 2, 4 and 6 and run as Deployments with that many ready replicas.
func DividedStaticSpec(t *testing.T, in SpecInput) {
	requireMembers(t, in, 3)
	createMyApp(t, in, newMyApp(in, "web", 12, staticWeights(in.Members, 1, 2, 3)))
	w := map[string]int32{in.Members[0]: 2, in.Members[1]: 4, in.Members[2]: 6}
	eventually(t, "status.placement 2/4/6 for weights 1:2:3 of 12", convergeTimeout, placementIs(in, "web", w))
	eventually(t, "Deployments with 2, 4 and 6 ready replicas", convergeTimeout, deploymentsRolledOut(in, "web", want(w)))
	eventually(t, "MyApp web Ready with 2/4/6", convergeTimeout, appReady(in, "web", w))
}

// DynamicWeightsSpec: 12 replicas Divided by dynamic weight
// (AvailableReplicas) follow the members' spare cpu as the hub reads it
// from MemberCluster status.resources: with 1-cpu pods on the testbed's 4,
// 8 and 12 cpu members that is 2, 4 and 6. The spec first waits until the
// hub's view of every member's capacity matches what the member's own
// nodes and pods say, then expects each member to get its share of 12 by
// spare cpu, rounded either way. The pods request 1 cpu where the members
// have room for 12 of those; on smaller members (kind's nodes have the
// host's cores, most of them taken by the control plane) the largest of
// 500m, 250m, 100m and 50m that leaves room for 12.
func DynamicWeightsSpec(t *testing.T, in SpecInput) {
	ctx := context.Background()
	spare := settledSpareCPU(t, in)
	const replicas = 12
	var (
		request int64 // millicores per pod
		room    map[string]int64
		total   int64
	)
	for _, request = range []int64{1000, 500, 250, 100, 50} {
		room, total = map[string]int64{}, 0
		for m, milli := range spare {
			room[m] = milli / request
			total += room[m]
		}
		if total >= replicas {
			break
		}
	}
	if total < replicas {
		t.Fatalf("the members have room for %d %dm replicas (spare millicores %v), the spec needs %d", total, request, spare, replicas)
	}
	t.Logf("room for %dm replicas by member: %v", request, room)

	app := newMyApp(in, "web", replicas, flotillav1.Placement{ReplicaScheduling: &flotillav1.ReplicaSchedulingStrategy{
		ReplicaSchedulingType:     flotillav1.ReplicaSchedulingDivided,
		ReplicaDivisionPreference: flotillav1.ReplicaDivisionWeighted,
		WeightPreference:          &flotillav1.ClusterPreferences{DynamicWeight: flotillav1.DynamicWeightAvailableReplicas},
	}})
	app.Spec.Template = &flotillav1.PodTemplate{Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(request, resource.DecimalSI)},
	}}
	createMyApp(t, in, app)

	var placed map[string]int32
	eventually(t, "status.placement sharing 12 replicas by spare cpu", convergeTimeout, func() error {
		got, err := getMyApp(ctx, in, "web")
		if err != nil {
			return err
		}
		placed = placementOf(got)
		var sum int32
		var problems []string
		for _, m := range in.Members {
			share := float64(replicas*room[m]) / float64(total)
			lo, hi := int32(share), int32(share)
			if float64(lo) != share {
				hi++
			}
			if n := placed[m]; n < lo || n > hi {
				problems = append(problems, fmt.Sprintf("%s got %d, want %d..%d (%.2f of %d by spare cpu)", m, n, lo, hi, share, replicas))
			}
			sum += placed[m]
		}
		if sum != replicas {
			problems = append(problems, fmt.Sprintf("%d replicas placed, want %d", sum, replicas))
		}
		if len(problems) > 0 {
			return fmt.Errorf("placement %v: %s", placed, strings.Join(problems, "; "))
		}
		return nil
	})
	t.Logf("placed by spare cpu: %v", placed)
	w := map[string]int32{}
	for m, n := range placed {
		if n > 0 {
			w[m] = n
		}
	}
	eventually(t, fmt.Sprintf("Deployments with %v ready replicas", w), convergeTimeout, deploymentsRolledOut(in, "web", want(w)))
	eventually(t, "MyApp web Ready", convergeTimeout, appReady(in, "web", w))
	// The app's own pods now use some of the room; the decision holds.
	consistently(t, "the dynamic placement staying put once its pods use the room", 10*time.Second, placementIs(in, "web", placed))
}

// settledSpareCPU waits until the hub's view of every member's spare cpu
// matches the member's nodes and pods, and returns it. A spec whose
// placement follows spare capacity (dynamic weights) starts from it: the
// agents recompute their capacity every 10 s, so right after a spec that
// filled the members (and waited for its pods to go) the hub may still
// see some of them full and give them none of the replicas.
func settledSpareCPU(t *testing.T, in SpecInput) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	spare := map[string]int64{}
	eventually(t, "the hub's view of every member's spare cpu matching the member's nodes and pods", convergeTimeout, func() error {
		for _, m := range in.Members {
			truth, err := spareCPU(ctx, in.Provider.Member(m))
			if err != nil {
				return fmt.Errorf("%s: %w", m, err)
			}
			mc := &flotillav1.MemberCluster{}
			if err := in.Provider.Hub().Get(ctx, client.ObjectKey{Name: m}, mc); err != nil {
				return err
			}
			rs := mc.Status.Resources
			if rs == nil {
				return fmt.Errorf("MemberCluster %s has no status.resources yet", m)
			}
			alloc, used := rs.Allocatable[corev1.ResourceCPU], rs.Allocated[corev1.ResourceCPU]
			if hub := alloc.MilliValue() - used.MilliValue(); hub != truth {
				return fmt.Errorf("MemberCluster %s reports %dm spare cpu, the member's nodes and pods say %dm", m, hub, truth)
			}
			spare[m] = truth
		}
		return nil
	})
	return spare
}

// spareCPU is the member's allocatable cpu over Ready, schedulable nodes
// minus what its non-terminated pods on them request, in millicpu.
func spareCPU(ctx context.Context, c client.Client) (int64, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return 0, err
	}
	eligible := map[string]bool{}
	var spare int64
	for _, n := range nodes.Items {
		if !nodeSchedulable(&n) {
			continue
		}
		eligible[n.Name] = true
		q := n.Status.Allocatable[corev1.ResourceCPU]
		spare += q.MilliValue()
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods); err != nil {
		return 0, err
	}
	for _, p := range pods.Items {
		if !eligible[p.Spec.NodeName] || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, ct := range p.Spec.Containers {
			q := ct.Resources.Requests[corev1.ResourceCPU]
			spare -= q.MilliValue()
		}
	}
	return spare, nil
}

func nodeSchedulable(n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ScaleSpec: a MyApp Divided 1:2:3 scales up from 6 to 18 replicas and
// down to 6 again; every member's Deployment follows (1/2/3, 3/6/9,
// 1/2/3 ready replicas) and is scaled in place, never recreated.
func ScaleSpec(t *testing.T, in SpecInput) {
	requireMembers(t, in, 3)
	ctx := context.Background()
	createMyApp(t, in, newMyApp(in, "web", 6, staticWeights(in.Members, 1, 2, 3)))
	m := in.Members
	small := map[string]int32{m[0]: 1, m[1]: 2, m[2]: 3}
	eventually(t, "Deployments with 1/2/3 ready replicas", convergeTimeout, deploymentsRolledOut(in, "web", want(small)))
	before, err := deploymentIDs(ctx, in, "web", m[:3]...)
	if err != nil {
		t.Fatal(err)
	}

	updateMyApp(t, in, "web", func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To[int32](18) })
	large := map[string]int32{m[0]: 3, m[1]: 6, m[2]: 9}
	eventually(t, "scale up to 18: Deployments with 3/6/9 ready replicas", convergeTimeout, deploymentsRolledOut(in, "web", want(large)))
	eventually(t, "scale up to 18: MyApp web Ready with 3/6/9", convergeTimeout, appReady(in, "web", large))

	updateMyApp(t, in, "web", func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To[int32](6) })
	eventually(t, "scale down to 6: Deployments with 1/2/3 ready replicas", convergeTimeout, deploymentsRolledOut(in, "web", want(small)))
	eventually(t, "scale down to 6: MyApp web Ready with 1/2/3", convergeTimeout, appReady(in, "web", small))

	after, err := deploymentIDs(ctx, in, "web", m[:3]...)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameUIDs(before, after, false); err != nil {
		t.Fatalf("scaling recreated member Deployments: %v", err)
	}
}

// ImageRolloutSpec: changing a Duplicated MyApp's image rolls the new image
// out in every member: each Deployment's template carries it, all its
// replicas are updated, ready and available, the old ReplicaSets are scaled
// to zero, the Deployments are the same objects, and the MyApp reports
// every replica updated and Ready for the new generation.
func ImageRolloutSpec(t *testing.T, in SpecInput) {
	ctx := context.Background()
	createMyApp(t, in, newMyApp(in, "web", 2, duplicated()))
	w := each(in.Members, 2)
	eventually(t, "Deployment web with 2 ready replicas of "+baseImage+" in every member", convergeTimeout, deploymentsRolledOut(in, "web", want(w)))
	before, err := deploymentIDs(ctx, in, "web", in.Members...)
	if err != nil {
		t.Fatal(err)
	}

	updateMyApp(t, in, "web", func(a *flotillav1.MyApp) { a.Spec.Image = rolledImage })
	rolled := map[string]deployWant{}
	for m, n := range w {
		rolled[m] = deployWant{replicas: n, image: rolledImage}
	}
	eventually(t, "image "+rolledImage+" rolled out in every member", convergeTimeout, deploymentsRolledOut(in, "web", rolled))
	eventually(t, "old ReplicaSets scaled to zero in every member", convergeTimeout, func() error {
		var problems []string
		for _, m := range in.Members {
			var list appsv1.ReplicaSetList
			if err := in.Provider.Member(m).List(ctx, &list, client.InNamespace(in.Namespace)); err != nil {
				return err
			}
			for _, rs := range list.Items {
				if img := rs.Spec.Template.Spec.Containers[0].Image; img != rolledImage && (ptr.Deref(rs.Spec.Replicas, 0) != 0 || rs.Status.Replicas != 0) {
					problems = append(problems, fmt.Sprintf("%s: ReplicaSet %s of %s still has %d replicas", m, rs.Name, img, rs.Status.Replicas))
				}
			}
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		return nil
	})
	eventually(t, "MyApp web Ready for the new image with every replica updated", convergeTimeout, func() error {
		if err := appReady(in, "web", w)(); err != nil {
			return err
		}
		app, err := getMyApp(ctx, in, "web")
		if err != nil {
			return err
		}
		if want := int32(2 * len(in.Members)); app.Status.UpdatedReplicas != want {
			return fmt.Errorf("status.updatedReplicas %d, want %d", app.Status.UpdatedReplicas, want)
		}
		return nil
	})
	after, err := deploymentIDs(ctx, in, "web", in.Members...)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameUIDs(before, after, false); err != nil {
		t.Fatalf("the image change recreated member Deployments: %v", err)
	}
}

// OverrideSpec: an override for the last member only replaces the image's
// registry and tag and the replicas there (3 of mirror.example.com/...:2.0)
// while the other members run the scheduled 2 replicas of the MyApp's own
// image; the placement itself is unchanged (overrides apply after
// scheduling) and the status reports the overridden replicas. A JSON-patch
// override for the first member sets the pods' node selector (to a label
// its first node has, so the pods still run) there only.
func OverrideSpec(t *testing.T, in SpecInput) {
	requireMembers(t, in, 2)
	ctx := context.Background()
	target := in.Members[len(in.Members)-1]
	first := in.Members[0]
	nodes := &corev1.NodeList{}
	if err := in.Provider.Member(first).List(ctx, nodes); err != nil || len(nodes.Items) == 0 || len(nodes.Items[0].Labels) == 0 {
		t.Fatalf("a labelled node of %s to select: %d nodes, %v", first, len(nodes.Items), err)
	}
	var key string
	for k := range nodes.Items[0].Labels {
		if key == "" || k < key {
			key = k
		}
	}
	selector := map[string]string{key: nodes.Items[0].Labels[key]}
	raw, err := json.Marshal(selector)
	if err != nil {
		t.Fatal(err)
	}
	app := newMyApp(in, "web", 2, duplicated())
	app.Spec.Overrides = []flotillav1.ClusterOverride{{
		Name:          "mirror-in-" + target,
		TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{target}},
		Image:         &flotillav1.ImageOverride{Registry: "mirror.example.com", Tag: "2.0"},
		Replicas:      ptr.To[int32](3),
	}, {
		Name:          "node-in-" + first,
		TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{first}},
		Patches: []flotillav1.JSONPatch{{Op: flotillav1.JSONPatchAdd, Path: "/spec/template/spec/nodeSelector",
			Value: &apiextensionsv1.JSON{Raw: raw}}},
	}}
	createMyApp(t, in, app)
	w := map[string]deployWant{}
	assigned := map[string]int32{}
	for _, m := range in.Members {
		w[m], assigned[m] = deployWant{replicas: 2}, 2
	}
	w[target], assigned[target] = deployWant{replicas: 3, image: overrideImage}, 3
	eventually(t, fmt.Sprintf("3 replicas of %s in %s only, 2 of %s elsewhere", overrideImage, target, baseImage), convergeTimeout, deploymentsRolledOut(in, "web", w))
	eventually(t, "status.placement of 2 everywhere (overrides apply after scheduling)", convergeTimeout, placementIs(in, "web", each(in.Members, 2)))
	eventually(t, "MyApp web Ready with the overridden replicas assigned", convergeTimeout, appReady(in, "web", assigned))
	for _, m := range in.Members {
		d := &appsv1.Deployment{}
		if err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: "web"}, d); err != nil {
			t.Fatal(err)
		}
		want := map[string]string(nil)
		if m == first {
			want = selector
		}
		if got := d.Spec.Template.Spec.NodeSelector; !maps.Equal(got, want) {
			t.Errorf("%s: the pods' nodeSelector is %v, want %v (the patch selects %s only)", m, got, want, first)
		}
	}
}

// DeleteSpec: deleting a MyApp removes everything it made everywhere: its
// Works on the hub, and its Deployment, ReplicaSets and pods in every
// member; then the MyApp itself goes (its finalizer waits for the Works).
func DeleteSpec(t *testing.T, in SpecInput) {
	ctx := context.Background()
	app := newMyApp(in, "web", 2, duplicated())
	createMyApp(t, in, app)
	eventually(t, "Deployment web with 2 ready replicas in every member", convergeTimeout, deploymentsRolledOut(in, "web", want(each(in.Members, 2))))
	eventually(t, "MyApp web carrying the cleanup finalizer", convergeTimeout, func() error {
		got, err := getMyApp(ctx, in, "web")
		if err != nil {
			return err
		}
		for _, f := range got.Finalizers {
			if f == flotillav1.MyAppFinalizer {
				return nil
			}
		}
		return fmt.Errorf("finalizers %v", got.Finalizers)
	})

	if err := retryWrite(ctx, func() error { return in.Provider.Hub().Delete(ctx, app) }); err != nil {
		t.Fatalf("deleting MyApp web: %v", err)
	}
	eventually(t, "MyApp web gone from the hub", convergeTimeout, func() error {
		_, err := getMyApp(ctx, in, "web")
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	eventually(t, "no Work of MyApp web left on the hub", convergeTimeout, worksOnlyIn(in, "web"))
	nothingLeft := func() error {
		var problems []string
		for _, m := range in.Members {
			c := in.Provider.Member(m)
			var deps appsv1.DeploymentList
			var sets appsv1.ReplicaSetList
			var pods corev1.PodList
			for _, l := range []client.ObjectList{&deps, &sets, &pods} {
				if err := c.List(ctx, l, client.InNamespace(in.Namespace)); err != nil {
					return fmt.Errorf("%s: %w", m, err)
				}
			}
			if n := len(deps.Items) + len(sets.Items) + len(pods.Items); n > 0 {
				problems = append(problems, fmt.Sprintf("%s: %d Deployments, %d ReplicaSets, %d pods", m, len(deps.Items), len(sets.Items), len(pods.Items)))
			}
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		return nil
	}
	eventually(t, "no Deployment, ReplicaSet or pod of web left in any member", convergeTimeout, nothingLeft)
	// An apply still in flight when the Work went must not bring the
	// Deployment back behind the agent's back.
	consistently(t, "nothing of web coming back in any member", 5*time.Second, nothingLeft)
}

// InvalidSpec: invalid MyApps are refused with a message naming the field,
// by the hub's webhook where CEL cannot say it (image syntax, a weight for
// a cluster the affinity never selects, an override producing a bad image)
// and by the CRD schema where it can (bounds, CEL rules); nothing is
// admitted. An update that would make a valid MyApp invalid is refused
// too, and leaves it as it was.
func InvalidSpec(t *testing.T, in SpecInput) {
	requireMembers(t, in, 2)
	ctx := context.Background()
	m := in.Members
	cases := []struct {
		name, by, field, message string
		mutate                   func(*flotillav1.MyApp)
	}{
		{"image with two tags", "webhook", "spec.image", "must be an image reference",
			func(a *flotillav1.MyApp) { a.Spec.Image = "nginx:1.0:2.0" }},
		{"weight for a cluster outside clusterNames", "webhook", "spec.placement.replicaScheduling.weightPreference.staticWeightList[1].targetCluster.clusterNames[0]", "never selects",
			func(a *flotillav1.MyApp) {
				a.Spec.Placement = staticWeights(m, 1, 1)
				a.Spec.Placement.ClusterAffinity = &flotillav1.ClusterAffinity{ClusterNames: []string{m[0]}}
			}},
		{"override producing an invalid image", "webhook", "spec.overrides[0].image", "not a valid image reference",
			func(a *flotillav1.MyApp) {
				a.Spec.Overrides = []flotillav1.ClusterOverride{{Name: "bad", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{m[0]}},
					Image: &flotillav1.ImageOverride{Registry: "mirror..example.com"}}}
			}},
		{"negative replicas", "schema", "spec.replicas", "should be greater than or equal to 0",
			func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To[int32](-3) }},
		{"minGroups above maxGroups", "CEL", "spec.placement.spreadConstraints[0]", "minGroups must be less than or equal to maxGroups",
			func(a *flotillav1.MyApp) {
				a.Spec.Placement.SpreadConstraints = []flotillav1.SpreadConstraint{{SpreadByField: flotillav1.SpreadByFieldRegion, MinGroups: ptr.To[int32](2), MaxGroups: ptr.To[int32](1)}}
			}},
		{"override patch that does not apply", "webhook", "spec.overrides[0].patches[0].path", "checked against the app's rendered Deployment",
			func(a *flotillav1.MyApp) {
				a.Spec.Overrides = []flotillav1.ClusterOverride{{Name: "bad-path", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{m[0]}},
					Patches: []flotillav1.JSONPatch{{Op: flotillav1.JSONPatchReplace, Path: "/spec/template/spec/nodeSelector/zone", Value: &apiextensionsv1.JSON{Raw: []byte(`"a"`)}}}}}
			}},
		{"override that changes nothing", "CEL", "spec.overrides[0]", "an override must set at least one of image, replicas, env, resources, nodeSelector, tolerations and patches",
			func(a *flotillav1.MyApp) {
				a.Spec.Overrides = []flotillav1.ClusterOverride{{Name: "empty", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{m[0]}}}}
			}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			app := newMyApp(in, fmt.Sprintf("bad-%d", i), 2, flotillav1.Placement{})
			tc.mutate(app)
			err := retryWrite(ctx, func() error { return in.Provider.Hub().Create(ctx, app) })
			if err == nil {
				t.Fatalf("an invalid MyApp (%s) was admitted; the %s should refuse it", tc.name, tc.by)
			}
			if !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("the refusal (by the %s) does not name %q with %q:\n%v", tc.by, tc.field, tc.message, err)
			}
			// The apiserver says when its webhook refused; the schema
			// answers before webhooks are called.
			if byWebhook := strings.Contains(err.Error(), "admission webhook"); byWebhook != (tc.by == "webhook") {
				t.Fatalf("refused by the webhook: %v, want it refused by the %s:\n%v", byWebhook, tc.by, err)
			}
			if _, err := getMyApp(ctx, in, app.Name); !apierrors.IsNotFound(err) {
				t.Fatalf("the refused MyApp %s exists anyway (%v)", app.Name, err)
			}
		})
	}

	t.Run("update making a valid MyApp invalid", func(t *testing.T) {
		createMyApp(t, in, newMyApp(in, "web", 1, flotillav1.Placement{}))
		running := want(each(in.Members, 1))
		eventually(t, "the valid MyApp web running 1 ready replica in every member", convergeTimeout, deploymentsRolledOut(in, "web", running))
		before, err := getMyApp(ctx, in, "web")
		if err != nil {
			t.Fatal(err)
		}
		deps, err := deploymentIDs(ctx, in, "web", in.Members...)
		if err != nil {
			t.Fatal(err)
		}
		updates := []struct {
			name, field, message string
			mutate               func(*flotillav1.MyApp)
		}{
			{"image with two tags (webhook)", "spec.image", "must be an image reference", func(a *flotillav1.MyApp) { a.Spec.Image = "nginx:1.0:2.0" }},
			{"negative replicas (schema)", "spec.replicas", "should be greater than or equal to 0", func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To[int32](-1) }},
		}
		for _, u := range updates {
			err := retryWrite(ctx, func() error {
				app, err := getMyApp(ctx, in, "web")
				if err != nil {
					return err
				}
				u.mutate(app)
				return in.Provider.Hub().Update(ctx, app)
			})
			if err == nil {
				t.Fatalf("an update to %s was admitted", u.name)
			}
			if !strings.Contains(err.Error(), u.field) || !strings.Contains(err.Error(), u.message) {
				t.Fatalf("the refusal of an update to %s does not name %q with %q:\n%v", u.name, u.field, u.message, err)
			}
		}
		after, err := getMyApp(ctx, in, "web")
		if err != nil {
			t.Fatal(err)
		}
		if after.Generation != before.Generation || after.Spec.Image != baseImage || ptr.Deref(after.Spec.Replicas, 0) != 1 {
			t.Fatalf("refused updates changed MyApp web: generation %d -> %d, image %q, replicas %d", before.Generation, after.Generation, after.Spec.Image, ptr.Deref(after.Spec.Replicas, 0))
		}
		consistently(t, "the members' Deployments untouched by the refused updates", 2*time.Second, func() error {
			now, err := deploymentIDs(ctx, in, "web", in.Members...)
			if err != nil {
				return err
			}
			if err := sameUIDs(deps, now, true); err != nil {
				return err
			}
			return deploymentsRolledOut(in, "web", running)()
		})
	})
}

// FullPodTemplateSpec: a MyApp whose pod template has an init container,
// a sidecar before its main container (named by spec.mainContainer), a
// readiness probe, a volume and a security context runs in every member
// as written, with a Service selecting its pods beside it, with spec.image on the main container only; a resources
// override for one member changes the main container there only; a new
// spec.image reaches the main container everywhere and leaves the
// sidecar's image alone.
func FullPodTemplateSpec(t *testing.T, in SpecInput) {
	requireMembers(t, in, 2)
	ctx := context.Background()
	target := in.Members[len(in.Members)-1]
	const sidecarImage = "registry.example.com/team/proxy:3.1"
	app := newMyApp(in, "shop", 2, duplicated())
	app.Spec.MainContainer = "web"
	app.Spec.Template = &flotillav1.PodTemplate{
		Metadata: &flotillav1.PodTemplateMetadata{Labels: map[string]string{"tier": "front"}},
		Spec: &corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000)},
			InitContainers:  []corev1.Container{{Name: "wait", Image: sidecarImage, Command: []string{"/bin/true"}}},
			Containers: []corev1.Container{
				{Name: "proxy", Image: sidecarImage, Args: []string{"--upstream=127.0.0.1:8080"}},
				{Name: "web", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
					VolumeMounts:   []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}},
					Resources:      corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}},
			},
			Volumes: []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	app.Spec.Service = &flotillav1.ServiceSpec{Ports: []flotillav1.ServicePort{{Name: "http", Port: 80, TargetPort: ptr.To(intstr.FromString("http"))}}}
	app.Spec.Overrides = []flotillav1.ClusterOverride{{
		Name: "more-cpu-in-" + target, TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{target}},
		Resources: &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}},
	}}
	createMyApp(t, in, app)
	w := map[string]deployWant{}
	for _, m := range in.Members {
		w[m] = deployWant{replicas: 2, main: "web"}
	}
	eventually(t, "Deployment shop with 2 ready replicas of "+baseImage+" in container web in every member", convergeTimeout, deploymentsRolledOut(in, "shop", w))
	eventually(t, "MyApp shop Ready", convergeTimeout, appReady(in, "shop", each(in.Members, 2)))
	for _, m := range in.Members {
		d := &appsv1.Deployment{}
		if err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: "shop"}, d); err != nil {
			t.Fatal(err)
		}
		ps := d.Spec.Template.Spec
		if len(ps.Containers) != 2 || ps.Containers[0].Name != "proxy" || ps.Containers[0].Image != sidecarImage || ps.Containers[1].Name != "web" {
			t.Fatalf("%s: containers %+v, want proxy (%s) then web", m, ps.Containers, sidecarImage)
		}
		if len(ps.InitContainers) != 1 || ps.InitContainers[0].Name != "wait" || ps.Containers[1].ReadinessProbe == nil ||
			len(ps.Volumes) != 1 || ps.Volumes[0].EmptyDir == nil || ps.SecurityContext == nil || ptr.Deref(ps.SecurityContext.RunAsUser, 0) != 1000 {
			t.Errorf("%s: the pod spec lost part of the template: %+v", m, ps)
		}
		svc := &corev1.Service{}
		if err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: "shop"}, svc); err != nil {
			t.Fatalf("%s: Service shop: %v", m, err)
		}
		if !maps.Equal(svc.Spec.Selector, d.Spec.Selector.MatchLabels) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 80 || svc.Spec.Ports[0].TargetPort != intstr.FromString("http") {
			t.Errorf("%s: Service shop selects %v with ports %+v; want the Deployment's pods (%v) on 80 -> http", m, svc.Spec.Selector, svc.Spec.Ports, d.Spec.Selector.MatchLabels)
		}
		if d.Spec.Template.Labels["tier"] != "front" {
			t.Errorf("%s: pod labels %v, want tier=front among them", m, d.Spec.Template.Labels)
		}
		wantCPU := "100m"
		if m == target {
			wantCPU = "250m"
		}
		if got := ps.Containers[1].Resources.Requests[corev1.ResourceCPU]; got.String() != wantCPU {
			t.Errorf("%s: container web requests cpu %s, want %s (the override selects %s only)", m, got.String(), wantCPU, target)
		}
	}

	updateMyApp(t, in, "shop", func(a *flotillav1.MyApp) { a.Spec.Image = overrideImage })
	for _, m := range in.Members {
		w[m] = deployWant{replicas: 2, main: "web", image: overrideImage}
	}
	eventually(t, "container web running "+overrideImage+" in every member", convergeTimeout, deploymentsRolledOut(in, "shop", w))
	for _, m := range in.Members {
		d := &appsv1.Deployment{}
		if err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: "shop"}, d); err != nil {
			t.Fatal(err)
		}
		if got := d.Spec.Template.Spec.Containers[0].Image; got != sidecarImage {
			t.Errorf("%s: the sidecar's image is %s after an image change, want %s kept", m, got, sidecarImage)
		}
	}
}
