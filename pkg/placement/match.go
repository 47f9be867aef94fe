package placement

import "github.com/flotilla-dev/flotilla/api/v1alpha1"

// AffinityMatches says whether a selects mc by the same rules the scheduler
// filters with; a nil affinity selects every cluster. The hub uses it to
// decide which clusters a per-cluster override applies to.
func AffinityMatches(a *v1alpha1.ClusterAffinity, mc *v1alpha1.MemberCluster) (bool, error) {
	compiled, err := compileAffinity(a)
	if err != nil {
		return false, err
	}
	ok, _ := compiled.match(mc)
	return ok, nil
}
