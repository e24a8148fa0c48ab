//go:build !race

package latency_test

// seedsPerJitter is how many seeds the statistical tests run for each
// jitter (fewer under the race detector: race_test.go).
const seedsPerJitter = 10
