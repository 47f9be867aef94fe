// Package testutil holds helpers that tests and test programs across the
// module share.
//
// Its pollers replace the hand-written "check until it holds or time runs
// out" loops that tests kept one copy of per package: Eventually and
// EventuallyStable fail a test naming what did not converge and the last
// error the check returned, and Consistently fails it when a check that
// should keep holding does not. Poll is Eventually's loop for programs,
// such as test/bench, that have no testing.TB and return an error instead.
//
// Every poller checks at once, then every DefaultInterval unless given
// Every. Checks are functions returning an error rather than a bool, so
// that the failure says why the condition did not hold, not only that it
// did not.
package testutil
