// Package ssacr wraps internal/ssa's apply bodies as the apply
// configurations controller-runtime's Client.Apply takes. It is apart from
// internal/ssa so that pkg/apply, which uses ssa but writes through
// pkg/kclient, does not link controller-runtime's client.
package ssacr

import (
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/internal/ssa"
)

// ApplyConfiguration returns ssa.Unstructured(obj, drop...) as the apply
// configuration that controller-runtime's Client.Apply takes:
//
//	ac, err := ssacr.ApplyConfiguration(work)
//	...
//	err = c.Apply(ctx, ac, client.FieldOwner(flotillav1.FieldOwnerHub), client.ForceOwnership)
//
// Apply decodes the server's answer into the body, which the caller does
// not see; a caller that needs the answer uses ssa.Unstructured and
// client.ApplyConfigurationFromUnstructured itself.
func ApplyConfiguration(obj runtime.Object, drop ...ssa.Path) (runtime.ApplyConfiguration, error) {
	u, err := ssa.Unstructured(obj, drop...)
	if err != nil {
		return nil, err
	}
	return client.ApplyConfigurationFromUnstructured(u), nil
}

// StatusApplyConfiguration returns ssa.StatusUnstructured(obj, drop...) as the
// apply configuration that controller-runtime's
// Client.SubResource("status").Apply takes.
func StatusApplyConfiguration(obj runtime.Object, drop ...ssa.Path) (runtime.ApplyConfiguration, error) {
	u, err := ssa.StatusUnstructured(obj, drop...)
	if err != nil {
		return nil, err
	}
	return client.ApplyConfigurationFromUnstructured(u), nil
}
