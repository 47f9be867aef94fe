// Package statusview renders the fleet's state as the tables people read:
// the member table and the per-cluster MyApp table that `make run` shows
// and `kubectl flotilla status` prints for any hub. Build turns the API
// objects into plain rows (a pure function, so the same rows feed the
// tables and -o json / yaml); WriteMembers and WriteApps lay them out.
// One copy for both callers keeps the demo and the CLI saying the same.
package statusview
