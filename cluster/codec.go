package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
	"github.com/sluicehq/sluice/internal/wire"
)

// Errors of the codec, for errors.Is.
var (
	// ErrUnregistered: a value of a type that is not registered was to be
	// sent to another node, or a message names a type this node has not
	// registered.
	ErrUnregistered = errors.New("cluster: type not registered")
	// ErrUndecodable: a message names a registered type but its bytes do
	// not decode as it.
	ErrUndecodable = errors.New("cluster: message does not decode")
)

// Type URL prefixes of the values the codec packs into anypb.Any: msgpack
// for Go values, protobuf for registered proto messages.
const (
	msgpackURL = "sluice.msgpack/"
	protoURL   = "sluice.proto/"
)

// internalPrefix starts the names of the cluster's own message types.
const internalPrefix = "sluice."

// Registry names the Go types that travel between nodes. Every node of a
// cluster registers the same names for the same types; a message naming
// an unregistered type is refused and counted, never decoded into some
// other type. Build one per application (there is no global registry):
//
//	reg := cluster.NewRegistry()
//	cluster.Register[Order](reg, "shop.Order")
//	cluster.Register[*Shipped](reg, "shop.Shipped") // pointers travel as pointers
//
// Values are encoded with msgpack (exported fields, by name), proto
// messages (a T implementing proto.Message) with protobuf. The name is what
// travels: renaming the Go type is safe, renaming its registered name is
// not. Safe for concurrent use; register before the first message flows.
type Registry struct {
	mu     sync.RWMutex
	byName map[string]regType
	byType map[reflect.Type]regName
}

type regType struct {
	t     reflect.Type
	proto bool
}

// regName is a registered type's name and the type URL it travels under.
type regName struct{ name, url string }

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{byName: map[string]regType{}, byType: map[reflect.Type]regName{}}
}

// Register adds type T to r under name. Names starting with "sluice." are
// reserved for the cluster's own messages. Registering the same type under
// the same name again is allowed; anything else that clashes is an error.
func Register[T any](r *Registry, name string) error {
	return r.register(reflect.TypeFor[T](), name, false)
}

func (r *Registry) register(t reflect.Type, name string, internal bool) error {
	switch {
	case name == "" || strings.ContainsAny(name, "/ \t\n"):
		return fmt.Errorf("cluster: register %v: invalid name %q", t, name)
	case !internal && strings.HasPrefix(name, internalPrefix):
		return fmt.Errorf("cluster: register %v: name %q: the prefix %q is reserved", t, name, internalPrefix)
	case t.Kind() == reflect.Interface:
		return fmt.Errorf("cluster: register %q: %v is an interface, want a concrete type", name, t)
	}
	isProto := t.Implements(reflect.TypeFor[proto.Message]())
	if t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(reflect.TypeFor[proto.Message]()) {
		return fmt.Errorf("cluster: register %q: proto message %v must be a pointer type", name, t)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.byName[name]; ok && old.t != t {
		return fmt.Errorf("cluster: register %v: name %q is already %v", t, name, old.t)
	}
	if old, ok := r.byType[t]; ok && old.name != name {
		return fmt.Errorf("cluster: register %q: %v is already registered as %q", name, t, old.name)
	}
	url := msgpackURL + name
	if isProto {
		url = protoURL + name
	}
	r.byName[name], r.byType[t] = regType{t: t, proto: isProto}, regName{name: name, url: url}
	return nil
}

// Names lists the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.byName))
	for n := range r.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (r *Registry) nameOf(t reflect.Type) (regName, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n, ok := r.byType[t]
	return n, ok
}

func (r *Registry) typeOf(name string) (regType, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.byName[name]
	return t, ok
}

// CodecStats counts what the codec of a node did.
type CodecStats struct {
	// Packed and Unpacked count the messages encoded for and decoded from
	// other nodes.
	Packed, Unpacked uint64
	// Unregistered counts values refused for sending: their type is not
	// registered (nor one of protoactor's own messages).
	Unregistered uint64
	// Unknown counts received messages naming a type not registered here.
	Unknown uint64
	// Undecodable counts received messages whose bytes did not decode,
	// and batches of a job's records from another node that did not (the
	// receiving instance fails and the job restarts from its checkpoint).
	Undecodable uint64
	// Foreign counts remote messages dropped before decoding, at the
	// connection: a protobuf type this node does not accept (it would
	// crash protoactor), or an envelope pointing outside its batch.
	Foreign uint64
	// WarningsUnkeyed counts warnings logged at debug level only because
	// maxWarnKeys distinct ones had already been warned about once (keys
	// are chosen by peers: type names, addresses).
	WarningsUnkeyed uint64
}

// maxWarnKeys bounds the codec's warn-once memory: past it, one line says
// so and further new warnings are counted (CodecStats.WarningsUnkeyed)
// and logged at debug level.
const maxWarnKeys = 1024

// codec packs registered Go values into anypb.Any for other nodes and
// unpacks them, refusing and counting everything else.
type codec struct {
	user, internal *Registry
	log            *slog.Logger
	local          func(*actor.PID) bool

	// topoMu orders the membership's updates of protoactor's block list
	// with the endpoint reader's reads of it (see guard.go).
	topoMu sync.Mutex

	packed, unpacked, unregistered, unknown, undecodable, foreign atomic.Uint64

	warnMu   sync.Mutex
	warned   map[any]struct{} // type or name: warn once each, up to maxWarnKeys
	unkeyed  atomic.Uint64    // warnings past maxWarnKeys
	warnKeys int              // the cap (maxWarnKeys; tests lower it)
}

func newCodec(user *Registry, log *slog.Logger, local func(*actor.PID) bool) (*codec, error) {
	if user == nil {
		user = NewRegistry()
	}
	c := &codec{user: user, internal: NewRegistry(), log: log, local: local,
		warned: map[any]struct{}{}, warnKeys: maxWarnKeys}
	if err := registerInternal(c.internal); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *codec) stats() CodecStats {
	return CodecStats{Packed: c.packed.Load(), Unpacked: c.unpacked.Load(), Unregistered: c.unregistered.Load(),
		Unknown: c.unknown.Load(), Undecodable: c.undecodable.Load(), Foreign: c.foreign.Load(),
		WarningsUnkeyed: c.unkeyed.Load()}
}

// warnOnce logs msg at warning level the first time key is seen, at
// debug level after. It remembers at most warnKeys keys: past them, one
// warning says so and the rest are counted and logged at debug level.
func (c *codec) warnOnce(key any, msg string, args ...any) {
	c.warnMu.Lock()
	_, seen := c.warned[key]
	full := !seen && len(c.warned) >= c.warnKeys
	first := false
	if !seen && !full {
		c.warned[key] = struct{}{}
	}
	if full {
		first = c.unkeyed.Add(1) == 1
	}
	c.warnMu.Unlock()
	switch {
	case !seen && !full:
		c.log.Warn(msg, args...)
	case first:
		c.log.Warn("cluster: too many distinct warnings: further new ones are counted (Stats().Codec.WarningsUnkeyed) and logged at debug level",
			"distinct", c.warnKeys)
		c.log.Debug(msg, args...)
	default:
		c.log.Debug(msg, args...)
	}
}

// protoactorMessage says whether m is one of protoactor's own messages
// (PoisonPill, Terminated, cluster gossip, ...), which travel as they are.
func protoactorMessage(m proto.Message) bool {
	return protoactorType(string(proto.MessageName(m)))
}

func protoactorType(name string) bool {
	return strings.HasPrefix(name, "actor.") || strings.HasPrefix(name, "remote.") || strings.HasPrefix(name, "cluster.")
}

// outgoing returns the form of msg that may go to another node: an
// *anypb.Any for a registered value, protoactor's own messages as they are.
func (c *codec) outgoing(msg any) (any, error) {
	switch m := msg.(type) {
	case *anypb.Any:
		return m, nil
	case proto.Message:
		if protoactorMessage(m) {
			return m, nil
		}
	}
	return c.pack(msg)
}

// pack encodes a registered value.
func (c *codec) pack(v any) (*anypb.Any, error) {
	switch m := v.(type) { // the hot ones, by hand (codec_wire.go)
	case *wire.Records:
		if m != nil {
			c.packed.Add(1)
			return &anypb.Any{TypeUrl: recordsURL, Value: appendRecords(make([]byte, 0, recordsSize(m)), m)}, nil
		}
	case *wire.Credit:
		if m != nil {
			c.packed.Add(1)
			return &anypb.Any{TypeUrl: creditURL, Value: appendCredit(make([]byte, 0, 32), m)}, nil
		}
	}
	t := reflect.TypeOf(v)
	if t == nil {
		c.unregistered.Add(1)
		return nil, fmt.Errorf("%w: nil message", ErrUnregistered)
	}
	rn, ok := c.internal.nameOf(t)
	if !ok {
		rn, ok = c.user.nameOf(t)
	}
	if !ok {
		c.unregistered.Add(1)
		return nil, fmt.Errorf("%w: %v", ErrUnregistered, t)
	}
	var (
		data []byte
		err  error
	)
	if pm, isProto := v.(proto.Message); isProto {
		data, err = proto.Marshal(pm)
	} else {
		e := encoders.Get().(*encoder)
		e.buf.Reset()
		if err = e.enc.Encode(v); err == nil {
			data = bytes.Clone(e.buf.Bytes())
		}
		if e.buf.Cap() <= 64<<10 { // keep small buffers only
			encoders.Put(e)
		}
	}
	if err != nil {
		c.unregistered.Add(1)
		return nil, fmt.Errorf("cluster: encode %q: %w", rn.name, err)
	}
	c.packed.Add(1)
	return &anypb.Any{TypeUrl: rn.url, Value: data}, nil
}

// encoder is a msgpack encoder with its buffer, reused through encoders.
type encoder struct {
	enc *msgpack.Encoder
	buf bytes.Buffer
}

var encoders = sync.Pool{New: func() any {
	e := &encoder{}
	e.enc = msgpack.NewEncoder(&e.buf)
	return e
}}

// unpack decodes a received Any into the registered type it names.
func (c *codec) unpack(a *anypb.Any) (v any, err error) { return c.unpackFrom(a, nil) }

// unpackFrom is unpack naming the sender, when known, in its errors.
func (c *codec) unpackFrom(a *anypb.Any, from *actor.PID) (v any, err error) {
	url := a.GetTypeUrl()
	switch url { // the hot ones, by hand (codec_wire.go); what they do not read goes on
	case recordsURL:
		if r, ok := scanRecords(a.GetValue()); ok {
			c.unpacked.Add(1)
			return r, nil
		}
	case creditURL:
		if m, ok := scanCredit(a.GetValue()); ok {
			c.unpacked.Add(1)
			return m, nil
		}
	}
	var name string
	var wantProto bool
	switch {
	case strings.HasPrefix(url, msgpackURL):
		name = url[len(msgpackURL):]
	case strings.HasPrefix(url, protoURL):
		name, wantProto = url[len(protoURL):], true
	default:
		c.unknown.Add(1)
		return nil, fmt.Errorf("%w: type URL %q", ErrUnregistered, url)
	}
	rt, ok := c.internal.typeOf(name)
	if !ok {
		rt, ok = c.user.typeOf(name)
	}
	if !ok || rt.proto != wantProto {
		c.unknown.Add(1)
		return nil, fmt.Errorf("%w: %q", ErrUnregistered, url)
	}
	defer func() { // a decoder must never take the node down
		if r := recover(); r != nil {
			c.undecodable.Add(1)
			v, err = nil, fmt.Errorf("%w: %q: panic: %v", ErrUndecodable, name, r)
		}
	}()
	base := rt.t
	if base.Kind() == reflect.Pointer {
		base = base.Elem()
	}
	ptr := reflect.New(base)
	if wantProto {
		err = proto.Unmarshal(a.GetValue(), ptr.Interface().(proto.Message))
	} else {
		// The one safe decode path: bounded decoded size, no panic, an
		// error naming the field and byte at fault.
		source := "a remote message"
		if from != nil {
			source += " from " + from.GetAddress()
		}
		err = msgpacksafe.Decode(a.GetValue(), ptr.Interface(), msgpacksafe.Limits{Source: source})
	}
	if err != nil {
		c.undecodable.Add(1)
		return nil, fmt.Errorf("%w: %q: %w", ErrUndecodable, name, err)
	}
	c.unpacked.Add(1)
	if rt.t.Kind() == reflect.Pointer {
		return ptr.Interface(), nil
	}
	return ptr.Elem().Interface(), nil
}

// senderMiddleware packs the messages that go to other nodes. A message
// that cannot go is dropped and counted (Node.Send reports it as an error
// instead, before sending).
func (c *codec) senderMiddleware(next actor.SenderFunc) actor.SenderFunc {
	return func(ctx actor.SenderContext, target *actor.PID, env *actor.MessageEnvelope) {
		if target == nil || c.local(target) {
			next(ctx, target, env)
			return
		}
		out, err := c.outgoing(env.Message)
		if err != nil {
			c.warnOnce(reflect.TypeOf(env.Message), "cluster: message not sent", "to", target.String(), "err", err)
			return
		}
		if out != env.Message {
			env = &actor.MessageEnvelope{Header: env.Header, Message: out, Sender: env.Sender}
		}
		next(ctx, target, env)
	}
}

// receiverMiddleware unpacks the messages that came from other nodes; one
// that does not unpack is dropped and counted.
func (c *codec) receiverMiddleware(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(ctx actor.ReceiverContext, env *actor.MessageEnvelope) {
		if a, ok := env.Message.(*anypb.Any); ok {
			v, err := c.unpackFrom(a, env.Sender)
			if err != nil {
				c.warnOnce(a.GetTypeUrl(), "cluster: message dropped", "at", ctx.Self().String(), "err", err)
				return
			}
			env = &actor.MessageEnvelope{Header: env.Header, Message: v, Sender: env.Sender}
		}
		next(ctx, env)
	}
}

// acceptsProto says whether a protobuf type may arrive from the network as
// a top-level message: protoactor's own types and anypb.Any, and only
// types linked into this binary (protoactor panics on any other).
func (c *codec) acceptsProto(name string) bool {
	if name != "google.protobuf.Any" && !protoactorType(name) {
		return false
	}
	_, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
	return err == nil
}
