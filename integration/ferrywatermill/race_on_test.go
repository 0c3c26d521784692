//go:build race

package ferrywatermill_test

// raceBuild is true in a -race build: see upstreamRace.
const raceBuild = true
