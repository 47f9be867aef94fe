// Package hub is the hub manager: the MyApp controller (placement, Works,
// status aggregation), MemberCluster health, the webhooks and the sync
// server wiring. Its binary and controllers come with the hub issue; the RBAC
// markers below already say what it may touch, and `make manifests` turns
// them into deploy/hub/rbac/role.yaml.
//
// +kubebuilder:rbac:groups=flotilla.dev,resources=myapps;memberclusters;works,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=flotilla.dev,resources=myapps/status;memberclusters/status;works/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=flotilla.dev,resources=myapps/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
package hub
