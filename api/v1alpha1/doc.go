// Package v1alpha1 holds Flotilla's API types (group flotilla.dev): MyApp,
// the user's application and its placement policy; MemberCluster, one member
// cluster as the hub sees it; and Work, what one member must run for one
// MyApp. It imports apimachinery and core types only, never controller code.
//
// +kubebuilder:object:generate=true
// +groupName=flotilla.dev
package v1alpha1
