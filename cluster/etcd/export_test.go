package etcd

// DecodePointer is decodePointer, for the tests of package etcd_test.
func DecodePointer(key string, value []byte) (checkpoint uint64, leader string, err error) {
	r, err := decodePointer(key, value)
	return r.Checkpoint, r.Leader, err
}
