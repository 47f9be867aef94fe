package v1alpha1

import "k8s.io/apimachinery/pkg/util/validation/field"

// DefaultContainerName is the name of the one container a MyApp without
// spec.template.spec runs.
const DefaultContainerName = "app"

// MainContainerIndex is the index in spec.template.spec.containers of the
// container spec.mainContainer names, or 0 (the first) when it names
// none. Without spec.template.spec it is 0: the one container "app". The
// error names the field that makes it impossible.
func MainContainerIndex(spec *MyAppSpec) (int, error) {
	t := spec.Template
	if t == nil || t.Spec == nil {
		if spec.MainContainer != "" && spec.MainContainer != DefaultContainerName {
			return 0, field.Invalid(field.NewPath("spec", "mainContainer"), spec.MainContainer,
				"without spec.template.spec the one container is named "+DefaultContainerName)
		}
		return 0, nil
	}
	if len(t.Spec.Containers) == 0 {
		return 0, field.Required(field.NewPath("spec", "template", "spec", "containers"),
			"a pod spec needs at least one container: the main container runs spec.image")
	}
	if spec.MainContainer == "" {
		return 0, nil
	}
	for i := range t.Spec.Containers {
		if t.Spec.Containers[i].Name == spec.MainContainer {
			return i, nil
		}
	}
	return 0, field.Invalid(field.NewPath("spec", "mainContainer"), spec.MainContainer,
		"names no container of spec.template.spec.containers")
}
