// Package agent is the per-member agent: leader-elected, it holds the gRPC
// stream to the hub, applies Works with server-side apply, prunes, watches
// what it owns and reports status and capacity. Its binary comes with the
// agent issue; the RBAC markers below (least privilege: what it applies,
// Leases, nodes and pods read-only for the resource summary) become
// deploy/agent/rbac/role.yaml through `make manifests`.
//
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
package agent
