package capacity

import "k8s.io/apimachinery/pkg/fields"

// terminalPhases selects pods that still hold their resources.
var terminalPhases = fields.AndSelectors(
	fields.OneTermNotEqualSelector("status.phase", "Succeeded"),
	fields.OneTermNotEqualSelector("status.phase", "Failed"),
)
