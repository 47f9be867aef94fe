// Package nspolicy decides which member namespaces a MyApp may place into.
//
// The rule: a MyApp in hub namespace N places only into member namespace N,
// unless FleetNamespacePolicy objects (cluster-scoped, written by fleet
// admins only) whose hubNamespaces match N grant more member namespaces.
// Decide applies it and says why, naming the policies it considered;
// PodSecurity picks the strictest Pod Security level of the policies that
// match N, which the hub renders into Work.spec.podSecurity. The hub's
// webhook and MyApp controller ask this package; the agents have their
// own, independent deny and allow lists (--denied-namespaces,
// --allowed-namespaces) that use the same glob syntax.
//
// Globs: '*' matches any run of characters (also none) and '?' exactly one;
// every other character matches itself. Namespace names cannot contain
// anything else special, so no escaping is needed. Everything here is pure:
// no client, no clock.
package nspolicy
