package setup

import (
	"os"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// The agent's record of the fleet it serves, and the Lease read by the
// fence.
//
// Both live in the agent's namespace, so the Role there grants them.
//
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update,namespace=flotilla-system
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get,namespace=flotilla-system

// agentNamespace is where the agent keeps its identity record.
func agentNamespace(opts Options) string {
	for _, ns := range []string{opts.Namespace, opts.LeaderElectionNamespace, os.Getenv("POD_NAMESPACE")} {
		if ns != "" {
			return ns
		}
	}
	return flotillav1.SystemNamespace
}
