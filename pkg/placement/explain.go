package placement

// The score bases Scores can report.
const (
	// ScoreNone: every chosen cluster runs spec.replicas (Duplicated
	// without maxGroups), so no score orders or divides them.
	ScoreNone = "None"
	// ScoreStaticWeight: the cluster's staticWeightList weight (1 for
	// all when the list is empty): replicas are divided in proportion.
	ScoreStaticWeight = "StaticWeight"
	// ScoreAvailableReplicas: how many more replicas the cluster's
	// reported spare capacity holds; dynamic weighting divides by it,
	// Aggregated and maxGroups prefer the clusters with the most.
	ScoreAvailableReplicas = "AvailableReplicas"
)

// ClusterScore is what the scheduler weighs one cluster by.
type ClusterScore struct {
	// Name of the MemberCluster.
	Name string
	// Basis is one of the Score* constants.
	Basis string
	// Score is the weight or the room; 0 with ScoreNone.
	Score int64
}

// Scores returns, sorted by name, the score Schedule gives each cluster of
// in when it divides or orders replicas: it explains a decision (`kubectl
// flotilla why`) and does not take part in one. Like Schedule it reads no
// clock and changes nothing; an invalid input is the error Schedule would
// return.
func Scores(in Input) ([]ClusterScore, error) {
	s, err := newScheduler(&in)
	if err != nil {
		return nil, err
	}
	basis := ScoreNone
	switch {
	case s.mode == staticWeighted:
		basis = ScoreStaticWeight
	case s.mode == dynamicWeighted || s.mode == aggregated || s.hasMax:
		basis = ScoreAvailableReplicas
	}
	out := make([]ClusterScore, 0, len(s.clusters))
	for i := range s.clusters {
		c := &s.clusters[i]
		cs := ClusterScore{Name: c.name, Basis: basis}
		switch basis {
		case ScoreStaticWeight:
			cs.Score = s.weightOf(c)
		case ScoreAvailableReplicas:
			cs.Score = s.room(c)
		}
		out = append(out, cs)
	}
	return out, nil
}
