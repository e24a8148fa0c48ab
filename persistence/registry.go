package persistence

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// Registry names the event types an application persists, and encodes
// them with msgpack. It decodes only registered names, never into an
// arbitrary type. Build one per application (there is no global registry):
//
//	events := persistence.NewRegistry().
//		Register("deposited", Deposited{}).
//		Register("withdrawn", Withdrawn{})
//
// Names are stored with every event: renaming a type's Go identifier is
// safe, changing its registered name is not. Safe for concurrent use.
type Registry struct {
	mu     sync.RWMutex
	byName map[string]reflect.Type
	byType map[reflect.Type]string
	errs   []error
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{byName: map[string]reflect.Type{}, byType: map[reflect.Type]string{}}
}

// Register adds the type of example under name and returns r, for
// chaining. Registering a pointer type (&Deposited{}) encodes and decodes
// pointers; a value type, values. A mistake (an empty name, a nil example,
// a name or type already registered differently) is kept and reported by
// Err, and by EventSourced, which refuses a registry with errors.
func (r *Registry) Register(name string, example any) *Registry {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := reflect.TypeOf(example)
	switch {
	case name == "":
		r.errs = append(r.errs, fmt.Errorf("persistence: registry: empty name for %v", t))
	case t == nil:
		r.errs = append(r.errs, fmt.Errorf("persistence: registry: %q: nil example", name))
	case r.byName[name] != nil && r.byName[name] != t:
		r.errs = append(r.errs, fmt.Errorf("persistence: registry: %q is already %v, not %v", name, r.byName[name], t))
	case r.byType[t] != "" && r.byType[t] != name:
		r.errs = append(r.errs, fmt.Errorf("persistence: registry: %v is already registered as %q, not %q", t, r.byType[t], name))
	default:
		r.byName[name], r.byType[t] = t, name
	}
	return r
}

// Err reports the mistakes of Register calls, or nil.
func (r *Registry) Err() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return errors.Join(r.errs...)
}

// Names lists the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.byName))
	for n := range r.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Encode returns v's registered name and its msgpack encoding.
func (r *Registry) Encode(v any) (name string, data []byte, err error) {
	r.mu.RLock()
	name, ok := r.byType[reflect.TypeOf(v)]
	r.mu.RUnlock()
	if !ok {
		return "", nil, fmt.Errorf("persistence: registry: %T is not registered", v)
	}
	if data, err = msgpack.Marshal(v); err != nil {
		return "", nil, fmt.Errorf("persistence: registry: encode %q: %w", name, err)
	}
	return name, data, nil
}

// Decode decodes data as the type registered under name. Data that does not
// decode, and an unregistered name, are errors wrapping ErrDecode.
func (r *Registry) Decode(name string, data []byte) (any, error) {
	r.mu.RLock()
	t, ok := r.byName[name]
	r.mu.RUnlock()
	if !ok {
		return nil, errorf(ErrDecode, "event type %q is not registered", name)
	}
	base := t
	if t.Kind() == reflect.Pointer {
		base = t.Elem()
	}
	v := reflect.New(base)
	if err := msgpacksafe.Decode(data, v.Interface(), msgpacksafe.Limits{Source: "event " + name}); err != nil {
		return nil, errorf(ErrDecode, "decode %q: %w", name, err)
	}
	if t.Kind() == reflect.Pointer {
		return v.Interface(), nil
	}
	return v.Elem().Interface(), nil
}
