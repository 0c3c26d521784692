//go:build !race

package ferrywatermill_test

const raceBuild = false
