// Package webhook is the hub's defaulting and validating admission webhook
// for MyApp: what the CRD's OpenAPI schema and CEL rules cannot say. The
// defaulter writes the failover and replica-scheduling policy in force into
// the object, so `kubectl get -o yaml` shows it; the validator checks image
// reference syntax (also of each override's result), label selectors,
// tolerations, requests against limits, that weights and spread
// constraints can be met by the clusters the affinity allows, and that the
// FleetNamespacePolicies (read from the manager's cache) allow the MyApp's
// target namespace (pkg/nspolicy). The MyApp controller checks the
// namespace policy again before it renders: the webhook is the early,
// friendly refusal, not the only one.
package webhook
