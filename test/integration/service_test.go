package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// TestServiceTravelsWithTheApp runs a hub, an agent for member-1 and
// member-2 in Push mode against real member control planes. A MyApp with
// spec.service gets a Service in both members beside its Deployment,
// selecting its pods, carrying Flotilla's identity. A hand edit of the
// Service is set back. Dropping spec.service prunes the Service and keeps
// the Deployment (same UID); deleting the MyApp removes the Deployment.
// A Service of someone else's in the same namespace is never touched.
func TestServiceTravelsWithTheApp(t *testing.T) {
	f, _ := startPullAndPush(t)
	ctx := context.Background()
	members := []string{"member-1", "member-2"}

	// Someone else's Service, in the namespace the app's goes to.
	bystanders := map[string]types.UID{}
	for _, m := range members {
		other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "default"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 9000}}, Selector: map[string]string{"app": "other"}}}
		if err := f.members[m].Create(ctx, other); err != nil {
			t.Fatal(err)
		}
		bystanders[m] = other.UID
	}

	app := newApp("web", 2, flotillav1.Placement{ClusterAffinity: &flotillav1.ClusterAffinity{ClusterNames: members}})
	app.Spec.Image = "nginx:1.27"
	app.Spec.Service = &flotillav1.ServiceSpec{
		Annotations: map[string]string{"team": "payments"},
		Ports: []flotillav1.ServicePort{
			{Name: "http", Port: 80, TargetPort: ptr.To(intstr.FromString("http"))},
			{Name: "metrics", Port: 9090},
		},
	}
	if err := f.hub.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	service := func(m string) (*corev1.Service, error) {
		s := &corev1.Service{}
		return s, f.members[m].Get(ctx, client.ObjectKey{Namespace: "default", Name: "web"}, s)
	}
	serviceUIDs := map[string]types.UID{}
	deploymentUIDs := map[string]types.UID{}
	eventually(t, "Service web beside Deployment web in both members", 60*time.Second, func() error {
		for _, m := range members {
			d, err := f.deployment(ctx, m, "default", "web")
			if err != nil {
				return fmt.Errorf("%s: Deployment: %w", m, err)
			}
			s, err := service(m)
			if err != nil {
				return fmt.Errorf("%s: Service: %w", m, err)
			}
			for k, v := range d.Spec.Selector.MatchLabels {
				if s.Spec.Selector[k] != v {
					return fmt.Errorf("%s: the Service selects %v, not the Deployment's pods (%v)", m, s.Spec.Selector, d.Spec.Selector.MatchLabels)
				}
			}
			if len(s.Spec.Selector) != len(d.Spec.Selector.MatchLabels) || s.Spec.Type != corev1.ServiceTypeClusterIP || len(s.Spec.Ports) != 2 ||
				s.Spec.Ports[0].TargetPort != intstr.FromString("http") || s.Spec.Ports[1].TargetPort != intstr.FromInt32(9090) || s.Spec.Ports[1].Protocol != corev1.ProtocolTCP {
				return fmt.Errorf("%s: Service spec %+v", m, s.Spec)
			}
			if s.Annotations["team"] != "payments" || s.Labels[flotillav1.LabelFleet] == "" || s.Labels[flotillav1.LabelCluster] != m || s.Annotations[flotillav1.AnnotationWork] == "" {
				return fmt.Errorf("%s: the Service lacks its annotation or Flotilla's identity: labels %v, annotations %v", m, s.Labels, s.Annotations)
			}
			serviceUIDs[m], deploymentUIDs[m] = s.UID, d.UID
		}
		return nil
	})

	// The Service's ready endpoints reach the MyApp's status, per cluster:
	// the testbed's fake nodes run the pods, the members' EndpointSlice
	// controllers count them.
	eventually(t, "2 ready endpoints per cluster in MyApp web's status", 60*time.Second, func() error {
		got := &flotillav1.MyApp{}
		if err := f.hub.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
			return err
		}
		if len(got.Status.Clusters) != len(members) {
			return fmt.Errorf("status.clusters: %+v", got.Status.Clusters)
		}
		for _, c := range got.Status.Clusters {
			if c.Endpoints == nil || c.Endpoints.Ready != 2 || c.Endpoints.NotReady != 0 {
				return fmt.Errorf("%s: endpoints %+v, want 2 ready", c.Name, c.Endpoints)
			}
		}
		return nil
	})

	// A hand edit of the Service is set back, in the pull and the push member.
	for _, m := range members {
		s, err := service(m)
		if err != nil {
			t.Fatal(err)
		}
		// A field Flotilla sets (not a list key: a changed key would be
		// another port to server-side apply, kept beside Flotilla's).
		s.Spec.Ports[1].TargetPort = intstr.FromInt32(9999)
		if err := f.members[m].Update(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the hand edits of Service web set back", 30*time.Second, func() error {
		for _, m := range members {
			s, err := service(m)
			if err != nil {
				return err
			}
			if len(s.Spec.Ports) != 2 || s.Spec.Ports[1].TargetPort != intstr.FromInt32(9090) || s.UID != serviceUIDs[m] {
				return fmt.Errorf("%s: ports %+v, uid %s (was %s)", m, s.Spec.Ports, s.UID, serviceUIDs[m])
			}
		}
		return nil
	})

	updateMyApp(t, f.hub, app, func(a *flotillav1.MyApp) { a.Spec.Service = nil })
	eventually(t, "Service web pruned, Deployment web kept, in both members", 60*time.Second, func() error {
		for _, m := range members {
			if _, err := service(m); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s: Service web still there (%v)", m, err)
			}
			d, err := f.deployment(ctx, m, "default", "web")
			if err != nil || d.UID != deploymentUIDs[m] {
				return fmt.Errorf("%s: Deployment web %v, uid %s (was %s)", m, err, d.UID, deploymentUIDs[m])
			}
		}
		return nil
	})

	if err := f.hub.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Deployment web gone from both members", 60*time.Second, func() error {
		for _, m := range members {
			if _, err := f.deployment(ctx, m, "default", "web"); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s: Deployment web still there (%v)", m, err)
			}
		}
		return nil
	})
	for _, m := range members {
		other := &corev1.Service{}
		if err := f.members[m].Get(ctx, client.ObjectKey{Namespace: "default", Name: "other"}, other); err != nil || other.UID != bystanders[m] {
			t.Errorf("%s: someone else's Service other was touched: %v, uid %s (was %s)", m, err, other.UID, bystanders[m])
		}
	}
}
