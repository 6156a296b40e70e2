//go:build !nolease

package coreapi

// leaseEnforced is true in every release build. The test-only build tag
// nolease turns it off, to prove that the frozen-holder test fails without
// the lease (e2e TestFrozenHolderNeverSendsItsStaleClaim).
const leaseEnforced = true
