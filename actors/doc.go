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
//	err = ref.Send(ctx, "hello")                       // waits while the mailbox is full, honours ctx
//	err = ref.TrySend("hello")                         // mailbox.ErrFull at once when full
//	reply, err := ref.Request(ctx, ask{})              // request/response with ctx as deadline
//	greeting, err := actors.Ask[string](ctx, ref, ask{}) // the same, typed
//
// Actors are plain protoactor-go actors (a Receive(actor.Context) method), so
// everything protoactor offers inside Receive is available.
//
// # Replies, failures and the actor's end
//
// A reply that is an error is the request's error (errors.Is works on it).
// A request never outlives the actor: when the actor ends before it
// answers, the request fails at once with Ref.Err (ErrActorStopped, or a
// *FailedError wrapping the failure that made its supervisor stop it, such
// as a *persistence.RecoveryError), and when the actor fails on the
// request's own message, with a *RequestFailedError wrapping the panic.
// Ref.Done is closed when the actor has ended. Failures and a supervisor's
// final stop are logged at WARN.
//
// Supervise(strategy) says how the actor itself is supervised (restart
// after a backoff, resume, stop, escalate, within a restart budget);
// SuperviseChildren(strategy) how it supervises the children it spawns.
// Both run on the System's clock (Config.Clock).
//
// An actor whose mailbox spills (mailbox.Spill) takes no requests
// (ErrRequestThroughSpill): a request's reply address cannot be written to
// disk. Send it messages that carry their own reply channel or id.
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
