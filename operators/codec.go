package operators

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/actors"
)

// wireEnvelope is an envelope as the spill stores it.
type wireEnvelope[T any] struct {
	Kind    actors.Kind       `msgpack:"k"`
	Channel int               `msgpack:"c"`
	Seq     uint64            `msgpack:"s"`
	Count   int               `msgpack:"n"`
	Mark    int64             `msgpack:"m,omitempty"`
	Headers map[string]string `msgpack:"h,omitempty"`
	Values  []T               `msgpack:"v,omitempty"`
	Times   []int64           `msgpack:"t,omitempty"`
}

// envelopeCodec encodes the envelopes of an edge carrying records of type T.
type envelopeCodec[T any] struct{}

func (envelopeCodec[T]) Encode(msg any) ([]byte, error) {
	env, ok := msg.(*actors.Envelope)
	if !ok {
		return nil, fmt.Errorf("not an envelope: %T", msg)
	}
	w := wireEnvelope[T]{Kind: env.Kind, Channel: env.Channel, Seq: env.Seq, Count: env.Count, Mark: env.Mark, Headers: env.Headers}
	if b, ok := env.Payload.(*batch[T]); ok {
		w.Values, w.Times = b.vs, b.ts
	}
	return msgpack.Marshal(&w)
}

func (envelopeCodec[T]) Decode(data []byte) (any, error) {
	var w wireEnvelope[T]
	if err := msgpack.Unmarshal(data, &w); err != nil {
		return nil, err
	}
	env := &actors.Envelope{Kind: w.Kind, Channel: w.Channel, Seq: w.Seq, Count: w.Count, Mark: w.Mark, Headers: w.Headers}
	if w.Kind == actors.Data {
		if len(w.Values) != w.Count {
			return nil, fmt.Errorf("envelope seq %d: %d records, header says %d", w.Seq, len(w.Values), w.Count)
		}
		env.Payload = &batch[T]{vs: w.Values, ts: w.Times}
	}
	return env, nil
}
