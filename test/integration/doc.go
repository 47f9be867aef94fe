// Package integration holds tests that run against real control planes from
// the testbed: the API's validation rules as the apiserver enforces them,
// and (with the hub and agent issues) the controllers and the sync protocol
// together.
package integration
