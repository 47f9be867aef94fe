// Package webhook is the hub's defaulting and validating admission webhook
// for MyApp: what the CRD's OpenAPI schema and CEL rules cannot say. The
// defaulter writes the failover and replica-scheduling policy in force into
// the object, so `kubectl get -o yaml` shows it; the validator checks image
// reference syntax (also of each override's result), label selectors,
// tolerations, requests against limits, and that weights and spread
// constraints can be met by the clusters the affinity allows.
package webhook
