//go:build race

package latency_test

// seedsPerJitter is how many seeds the statistical tests run for each
// jitter. Under the race detector the sample runs several times slower
// (its synctest bubble keeps the outcome the same): a few seeds still run
// every path for the race detector's sake, and .ci/test's second pass,
// without it, runs all ten.
const seedsPerJitter = 3
