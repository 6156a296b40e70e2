//go:build nolease

package coreapi

// leaseEnforced is false only in the test-only nolease build: the relay
// then sends a claim however old it is, and the frozen-holder test must
// catch the double application that follows.
const leaseEnforced = false
