// Package actors is sluice's host: a System owns a protoactor-go ActorSystem,
// its own root context, the logger and the OpenTelemetry providers, and runs
// both embedded actors and stream topologies.
//
// # Embedding actors
//
// An application that only wants supervised actors with bounded mailboxes
// spawns them on a System and talks to them through a Ref:
//
//	sys, err := actors.NewSystem(actors.Config{Logger: log})
//	if err != nil { ... }
//	defer sys.Stop(ctx)
//
//	ref, err := sys.Spawn("greeter", func() actor.Actor { return &greeter{} }, actors.Capacity(64))
//	err = ref.Send(ctx, "hello")           // waits while the mailbox is full, honours ctx
//	err = ref.TrySend("hello")             // mailbox.ErrFull at once when full
//	reply, err := ref.Request(ctx, ask{})  // request/response with ctx as deadline
//
// Actors are plain protoactor-go actors (a Receive(actor.Context) method), so
// everything protoactor offers inside Receive is available.
//
// # Running jobs
//
// A stream topology (package operators) is a Job. System.Run starts it and
// returns a Run handle whose lifecycle follows http.Server: Wait for the job to
// finish by itself, Drain to ask its sources to stop and let in-flight records
// finish, Stop to end it now. System.Stop drains every running job and then
// shuts the actor system down, all within the caller's deadline.
//
// # Envelopes
//
// Every message between operators is an *Envelope: a batch of records (or one
// control record: end-of-stream, a barrier, a watermark), the receiver's input
// channel, a per-channel sequence number and headers for trace context.
// Control envelopes keep their order relative to data and never count against
// mailbox capacity.
package actors
