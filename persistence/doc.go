// Package persistence keeps durable state for sluice: journals of events,
// snapshots and the checkpoints of jobs, in memory or in the system's bbolt
// store, and the event-sourced actor that applications embed.
package persistence
