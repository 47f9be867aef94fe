package deployrbac

import (
	"fmt"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestLoadShippedRBAC checks that each component's files decode into the
// objects the tests rely on: a ClusterRole and a Role of its name, the
// Role in flotilla-system, each bound to the component's service account,
// and the metrics reader. A file that grew a document Load cannot read, or
// a binding that points at the wrong kind, fails here before any apiserver.
func TestLoadShippedRBAC(t *testing.T) {
	for _, c := range []Component{Hub, Agent} {
		objs, err := Load(Files(c)...)
		if err != nil {
			t.Fatal(err)
		}
		name := "flotilla-" + string(c)
		seen := map[string]bool{}
		for _, o := range objs {
			switch o := o.(type) {
			case *rbacv1.ClusterRole:
				seen["ClusterRole/"+o.Name] = true
			case *rbacv1.Role:
				seen["Role/"+o.Namespace+"/"+o.Name] = true
			case *rbacv1.ClusterRoleBinding:
				if len(o.Subjects) == 1 && o.Subjects[0].Namespace == "flotilla-system" && o.Subjects[0].Name == name {
					seen["ClusterRoleBinding->"+o.RoleRef.Kind+"/"+o.RoleRef.Name] = true
				}
			case *rbacv1.RoleBinding:
				if len(o.Subjects) == 1 && o.Subjects[0].Namespace == "flotilla-system" && o.Subjects[0].Name == name {
					seen["RoleBinding/"+o.Namespace+"->"+o.RoleRef.Kind+"/"+o.RoleRef.Name] = true
				}
			default:
				t.Errorf("%s: unexpected %T in the RBAC files", c, o)
			}
		}
		for _, want := range []string{
			"ClusterRole/" + name,
			"Role/flotilla-system/" + name,
			"ClusterRoleBinding->ClusterRole/" + name,
			"RoleBinding/flotilla-system->Role/" + name,
			"ClusterRole/flotilla-metrics-reader",
		} {
			if !seen[want] {
				t.Errorf("%s: no %s in %v (found %v)", c, want, Files(c), fmt.Sprint(seen))
			}
		}
	}
}
