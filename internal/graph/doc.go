// Package graph is what a topology is before it runs: the logical graph of
// operators (Node, Topology, typed Stream and KeyedStream handles, options),
// its validation, and the planner that fuses operators into tasks and
// computes the physical edges between them (Plan).
//
// The generic constructors (Map, KeyBy, Count, WindowAggregate, Join, ...)
// add a node and give it the typed builders of its stage (package stage),
// so that the runtime, package engine, builds each instance's chain without
// knowing its types. Errors are built with the Errors kit the user API
// gives (SetErrors), so that package operators reports its own types.
//
// Users never import it: package operators wraps every value it hands out.
package graph
