package broker

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/moonmq/moonmq/internal/cluster/meta"
	"github.com/moonmq/moonmq/internal/cluster/metanode"
	"github.com/moonmq/moonmq/internal/recordbatch"
)

// In cluster mode the ACLs and the SCRAM users set at runtime live in the
// metadata log (meta.SecurityRecord), not in a group's __moonmq_acls and
// __moonmq_users: they hold on every broker of every group. The records
// carry the same keys and values those topics hold, so internal/auth
// applies them the same way in both modes.

// securityStore is the metadata store that stands for one of the
// single-group security topics.
func securityStore(topic string) (meta.SecurityStore, bool) {
	switch topic {
	case aclsTopic:
		return meta.SecurityACLs, true
	case usersTopic:
		return meta.SecurityUsers, true
	}
	return "", false
}

// securityMirror is what this broker last applied of the metadata log's
// security stores. It applies changes key by key, never by a reset: an
// authorization check between two changes sees either the old binding or
// the new one, and never an empty set, which with
// AllowEveryoneIfNoAclFound would allow everything.
type securityMirror struct {
	mu      sync.Mutex
	applied map[meta.SecurityStore]map[string][]byte
}

// writeSecurity is writeStateRecords in cluster mode: the records go to
// the metadata log in one entry, and the call returns once this broker
// has applied them.
func (c *clusterMode) writeSecurity(ctx context.Context, topic string, recs []recordbatch.Record) error {
	store, ok := securityStore(topic)
	if !ok {
		return fmt.Errorf("cluster mode: %s is not a security store", topic)
	}
	cmd := metanode.SetSecurity{Records: make([]meta.SecurityRecord, len(recs))}
	for i, r := range recs {
		cmd.Records[i] = meta.SecurityRecord{Store: store, Key: r.Key, Value: r.Value}
	}
	res, err := c.propose(ctx, metanode.Command{SetSecurity: &cmd})
	if err != nil {
		return metaWriteError{code: metanode.ErrorCode(err), err: err}
	}
	if err := c.node.WaitApplied(ctx, res.Index); err != nil {
		return metaWriteError{code: errRequestTimedOut, err: err}
	}
	c.applySecurity()
	return nil
}

// metaWriteError is a failed write to the metadata log with the Kafka
// error code that says why (stateWriteError).
type metaWriteError struct {
	code int16
	err  error
}

func (e metaWriteError) Error() string { return "metadata log: " + e.err.Error() }
func (e metaWriteError) Unwrap() error { return e.err }

// applySecurity brings the broker's ACLs and users up to date with the
// metadata log.
func (c *clusterMode) applySecurity() {
	stores := map[meta.SecurityStore]func(recordbatch.Record) error{
		meta.SecurityACLs:  c.b.sec.acls.ApplyRecord,
		meta.SecurityUsers: c.b.sec.users.ApplyRecord,
	}
	m := &c.security
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.applied == nil {
		m.applied = map[meta.SecurityStore]map[string][]byte{}
	}
	for store, apply := range stores {
		var now map[string][]byte
		c.node.Read(func(s *meta.State, _ uint64) { now = s.Security(store) })
		was := m.applied[store]
		// Sorted, so that every broker applies a change in one order.
		for _, k := range slices.Sorted(maps.Keys(now)) {
			if v, ok := was[k]; ok && bytes.Equal(v, now[k]) {
				continue
			}
			if err := apply(recordbatch.Record{Key: []byte(k), Value: now[k]}); err != nil {
				c.log.Warn("cluster mode: skipping an undecodable security record", "store", store, "err", err)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(was)) {
			if _, ok := now[k]; !ok {
				if err := apply(recordbatch.Record{Key: []byte(k)}); err != nil {
					c.log.Warn("cluster mode: skipping an undecodable security record", "store", store, "err", err)
				}
			}
		}
		m.applied[store] = now
	}
}
