package mailbox

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// A group whose record-count varint is 2^63+7 made Posted and
// SpillPending negative on recovery, and Queues() hid it. Now the count
// is refused: the mailbox does not open (its error names the queue, the
// file and the group) and Queues reports the damaged group.
func TestSpillImpossibleRecordCount(t *testing.T) {
	st, err := OpenSpillStore(filepath.Join(t.TempDir(), "spill.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	good := appendEntry(nil, spilled{n: 2, data: []byte{0xc0}})
	bad := append([]byte{0}, binary.AppendUvarint(nil, 1<<63+7)...)
	bad = append(binary.AppendUvarint(bad, 1), 0xc0)
	err = st.db.Update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists(spillBucket)
		if err != nil {
			return err
		}
		b, err := root.CreateBucket([]byte("q"))
		if err != nil {
			return err
		}
		if err := b.Put(binary.BigEndian.AppendUint64(nil, 1), good); err != nil {
			return err
		}
		return b.Put(binary.BigEndian.AppendUint64(nil, 2), bad)
	})
	if err != nil {
		t.Fatal(err)
	}
	qs, err := st.Queues()
	if !errors.Is(err, ErrSpillCorrupt) || !strings.Contains(err.Error(), `"q"`) || !strings.Contains(err.Error(), "record count 9223372036854775815") {
		t.Fatalf("Queues() error = %v, want ErrSpillCorrupt naming the queue and the count", err)
	}
	if len(qs) != 1 || qs[0].Messages != 1 || qs[0].Groups != 2 || qs[0].Damaged != 1 {
		t.Fatalf("Queues() = %+v, want q with 1 message, 2 groups, 1 damaged", qs)
	}
	mb, err := New(Spill(4, SpillOptions{Store: st, Queue: "q", Codec: NewTypeCodec(), Keep: true}))
	if err == nil {
		s := mb.Stats()
		t.Fatalf("New opened the queue: Posted %d, SpillPending %d", s.Posted, s.SpillPending)
	}
	if !strings.Contains(err.Error(), st.Path()) || !strings.Contains(err.Error(), "group 2") {
		t.Fatalf("New = %v, want an error naming %s and group 2", err, st.Path())
	}
}
