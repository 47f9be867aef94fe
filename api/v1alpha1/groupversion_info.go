package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of every type in this package.
var GroupVersion = schema.GroupVersion{Group: "flotilla.dev", Version: "v1alpha1"}

var (
	// SchemeBuilder registers this package's types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&MyApp{}, &MyAppList{},
		&MemberCluster{}, &MemberClusterList{},
		&Work{}, &WorkList{},
		&FleetNamespacePolicy{}, &FleetNamespacePolicyList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
