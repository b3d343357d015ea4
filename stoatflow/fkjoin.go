package stoatflow

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// The foreign-key join follows Kafka Streams (KIP-213). The left table's
// rows and the right table's rows live in tasks that are not
// co-partitioned, so the join runs as a conversation over two internal
// topics:
//
//   - <app>-<store>-subscription-registration, keyed by the foreign key
//     and partitioned like the right table: each left update subscribes its
//     left key to the row's foreign key (and unsubscribes the old one when
//     the foreign key changed), carrying a hash of the left value and the
//     left task's partition.
//   - <app>-<store>-subscription-response, keyed by the left key and
//     partitioned like the left table (each response goes back to the
//     partition its subscription came from): the right value a subscription
//     or a right update found, with the hash it was for.
//
// On the right side the store <store>-subscription-store is the derived
// index foreign key | left key -> (partition, hash): a subscription updates
// it, and a right update answers every left key in it. On the left side a
// response whose hash is not that of the left row's current value is stale
// (the row changed since) and is dropped; the current value's own response
// is on its way. Deleting a left row retracts its result at once;
// deleting a right row answers "not found" to every subscriber, which
// retracts their results (or, in a left join, joins them with nothing).
//
// Both internal topics take the partition count of the side that reads
// them. The registrations are partitioned by hashing the foreign key's
// bytes as Kafka's default partitioner does, so the right table's topic
// must be partitioned that way too (it is, when its producer uses the
// default partitioner and the right table's key serde).

// fkInstruction says what a subscription asks of the right side.
type fkInstruction byte

const (
	// fkUnsubscribe drops the subscription and answers nothing.
	fkUnsubscribe fkInstruction = 1 + iota
	// fkSubscribeIfFound subscribes and answers only when the foreign key
	// has a value: a new left row of an inner join, which has no result
	// to retract.
	fkSubscribeIfFound
	// fkSubscribeAlways subscribes and always answers, so that the left
	// side can retract an earlier result (an inner join's row that changed)
	// or join with nothing (a left join).
	fkSubscribeAlways
)

type fkSubscription struct {
	instr     fkInstruction
	partition int32  // the left task's partition, where responses go
	hash      []byte // of the left value; empty when unsubscribing
	leftKey   []byte
}

type fkResponse struct {
	partition int32
	hash      []byte
	found     bool
	value     []byte // the right value's bytes, when found
}

const fkWireVersion = 1

// fkHash identifies a left value in subscriptions and responses.
func fkHash(b []byte) []byte {
	h := sha256.Sum256(b)
	return h[:16]
}

var errFKWire = errors.New("foreign-key join: damaged internal record")

var subscriptionCodec = anySerde{
	enc: func(v any) ([]byte, error) {
		s, ok := v.(fkSubscription)
		if !ok {
			return nil, fmt.Errorf("foreign-key join: subscription of type %T", v)
		}
		b := []byte{fkWireVersion, byte(s.instr)}
		b = binary.BigEndian.AppendUint32(b, uint32(s.partition))
		b = append(b, byte(len(s.hash)))
		b = append(b, s.hash...)
		return append(b, s.leftKey...), nil
	},
	dec: func(b []byte) (any, error) {
		if len(b) < 7 || b[0] != fkWireVersion || len(b) < 7+int(b[6]) {
			return nil, errFKWire
		}
		n := int(b[6])
		return fkSubscription{instr: fkInstruction(b[1]), partition: int32(binary.BigEndian.Uint32(b[2:6])),
			hash: b[7 : 7+n], leftKey: b[7+n:]}, nil
	},
}

var responseCodec = anySerde{
	enc: func(v any) ([]byte, error) {
		r, ok := v.(fkResponse)
		if !ok {
			return nil, fmt.Errorf("foreign-key join: response of type %T", v)
		}
		b := binary.BigEndian.AppendUint32([]byte{fkWireVersion}, uint32(r.partition))
		b = append(b, byte(len(r.hash)))
		b = append(b, r.hash...)
		if !r.found {
			return append(b, 0), nil
		}
		return append(append(b, 1), r.value...), nil
	},
	dec: func(b []byte) (any, error) {
		if len(b) < 6 || b[0] != fkWireVersion || len(b) < 7+int(b[5]) {
			return nil, errFKWire
		}
		n := int(b[5])
		r := fkResponse{partition: int32(binary.BigEndian.Uint32(b[1:5])), hash: b[6 : 6+n], found: b[6+n] == 1}
		if r.found {
			r.value = b[7+n:]
		}
		return r, nil
	},
}

// The subscription index: len(fk) (4) | fk | left key -> partition (4) | hash.
func fkIndexPrefix(fk []byte) []byte {
	return append(binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(fk)), uint32(len(fk))), fk...)
}

// JoinForeignKey is the inner join of a left table with a right table on a
// foreign key extracted from each left value: the result, keyed like the
// left table and materialized in store, holds joiner(v, vo) for every left
// row whose foreign key has a right row. The tables need not be
// co-partitioned (see the protocol above); the join is eventually
// consistent: after input stops, the result is that of the final tables.
func JoinForeignKey[K, V, KO, VO, VR any](left Table[K, V], right Table[KO, VO], fk func(V) KO, joiner func(v V, vo VO) VR, store string, vrs Serde[VR], opts ...StoreOption) Table[K, VR] {
	return fkJoin(left, right, fk, false, func(v V, vo VO, _ bool) VR { return joiner(v, vo) }, store, vrs, opts)
}

// LeftJoinForeignKey is JoinForeignKey keeping every left row: ok is false
// (and vo the zero value) while the foreign key has no right row.
func LeftJoinForeignKey[K, V, KO, VO, VR any](left Table[K, V], right Table[KO, VO], fk func(V) KO, joiner func(v V, vo VO, ok bool) VR, store string, vrs Serde[VR], opts ...StoreOption) Table[K, VR] {
	return fkJoin(left, right, fk, true, joiner, store, vrs, opts)
}

func fkJoin[K, V, KO, VO, VR any](left Table[K, V], right Table[KO, VO], fk func(V) KO, leftJoin bool, joiner func(V, VO, bool) VR, store string, vrs Serde[VR], opts []StoreOption) Table[K, VR] {
	t := left.t
	if right.t != t {
		t.fail("JoinForeignKey %s: the tables belong to different topologies", store)
		return Table[K, VR]{t: t}
	}
	lstore, rstore := left.kvStore("JoinForeignKey"), right.kvStore("JoinForeignKey")
	index := store + "-subscription-store"
	regTopic, respTopic := store+"-subscription-registration", store+"-subscription-response"
	AddKeyValueStore(t, store, left.ks, vrs, opts...)
	t.addStore(index, kindKeyValue, nil, nil,
		anySerde{enc: errEnc(index), dec: func(b []byte) (any, error) {
			if len(b) < 4 || len(b) < 4+int(binary.BigEndian.Uint32(b)) {
				return nil, errFKWire
			}
			n := 4 + int(binary.BigEndian.Uint32(b))
			ko, err := right.ks.Decode(b[4:n])
			if err != nil {
				return nil, err
			}
			k, err := left.ks.Decode(b[n:])
			return map[string]any{"foreignKey": ko, "key": k}, err
		}},
		anySerde{enc: errEnc(index), dec: func(b []byte) (any, error) {
			if len(b) < 4 {
				return nil, errFKWire
			}
			return map[string]any{"partition": int32(binary.BigEndian.Uint32(b)), "hash": fmt.Sprintf("%x", b[4:])}, nil
		}},
		"foreign-key subscriptions", opts)

	// Left side: subscribe on every left change.
	send := t.addNode(store+"-fk-send", "fk-send", left.n)
	send.stores = []string{lstore}
	regSink := t.addNode(store+"-fk-registration-sink", "sink", send)
	regSink.sink = &sinkSpec{topic: regTopic, key: erase(Bytes), val: subscriptionCodec, internal: true}
	// The result's materialization; its name is known to send, which
	// retracts a deleted left row's result there directly.
	matName := store + "-materialize"
	send.make = func() nodeProc {
		return &fkSendProc[K, V, KO]{lstore: lstore, lks: left.ks, rks: right.ks, fk: fk, leftJoin: leftJoin, sink: regSink.name, mat: matName}
	}

	// Right side: keep the index, answer subscriptions and right changes.
	regSrc := t.addNode(store+"-fk-registration-source", "source")
	regSrc.source = &sourceSpec{topics: []string{regTopic}, key: erase(Bytes), val: subscriptionCodec, internal: true, readerSized: true}
	sub := t.addNode(store+"-fk-subscribe", "fk-subscribe", regSrc)
	sub.stores = []string{index, rstore}
	sub.make = func() nodeProc { return &fkSubscribeProc{index: index, rstore: rstore} }
	rchg := t.addNode(store+"-fk-right-change", "fk-right-change", right.n)
	rchg.stores = []string{index, rstore}
	rchg.make = func() nodeProc { return &fkRightChangeProc[KO]{index: index, rstore: rstore, rks: right.ks} }
	respSink := t.addNode(store+"-fk-response-sink", "sink", sub, rchg)
	respSink.sink = &sinkSpec{topic: respTopic, key: erase(Bytes), val: responseCodec, internal: true,
		partitionOf: func(_ []byte, v any, _ int) int32 { return v.(fkResponse).partition }}

	// Left side again: join the responses that are not stale.
	respSrc := t.addNode(store+"-fk-response-source", "source")
	respSrc.source = &sourceSpec{topics: []string{respTopic}, key: erase(Bytes), val: responseCodec, internal: true, readerSized: true}
	resolve := t.addNode(store+"-fk-resolve", "fk-resolve", respSrc)
	resolve.stores = []string{lstore}
	resolve.make = func() nodeProc {
		return &fkResolveProc[K, V, VO, VR]{lstore: lstore, lks: left.ks, lvs: left.vs, rvs: right.vs, leftJoin: leftJoin, joiner: joiner}
	}
	mat := t.addNode(matName, "table", send, resolve)
	mat.stores = []string{store}
	mat.make = func() nodeProc { return &materializeProc[K, VR]{store: store} }
	return Table[K, VR]{t: t, n: mat, store: store, ks: left.ks, vs: vrs}
}

func errEnc(store string) func(any) ([]byte, error) {
	return func(any) ([]byte, error) { return nil, fmt.Errorf("store %s is internal to a foreign-key join", store) }
}

// rawStore opens a store's handle for byte-level access.
func rawStore(pc *procCtx, name string) (*storeHandle, error) {
	s, err := pc.store(name)
	if err != nil {
		return nil, err
	}
	return s.handle(), nil
}

// fkSendProc turns the left table's changes into subscriptions.
type fkSendProc[K, V, KO any] struct {
	lstore    string
	lks       Serde[K]
	rks       Serde[KO]
	fk        func(V) KO
	leftJoin  bool
	sink, mat string
	lh        *storeHandle
	pc        *procCtx
}

func (p *fkSendProc[K, V, KO]) init(pc *procCtx) (err error) {
	p.pc = pc
	p.lh, err = rawStore(pc, p.lstore)
	return err
}

func (p *fkSendProc[K, V, KO]) process(r record) error {
	c, _ := r.value.(change)
	kb, err := p.lks.Encode(key[K](r))
	if err != nil {
		return err
	}
	var oldFK []byte
	if c.old != nil {
		if oldFK, err = p.rks.Encode(p.fk(c.old.(V))); err != nil {
			return err
		}
	}
	send := func(fk []byte, instr fkInstruction, hash []byte) {
		p.pc.forward(record{key: fk, value: fkSubscription{instr: instr, partition: p.pc.task.partition, hash: hash, leftKey: kb}, ts: r.ts}, p.sink)
	}
	if c.new == nil {
		if c.old != nil {
			send(oldFK, fkUnsubscribe, nil)
			p.pc.forward(record{key: r.key, ts: r.ts, headers: r.headers}, p.mat)
		}
		return nil
	}
	newFK, err := p.rks.Encode(p.fk(c.new.(V)))
	if err != nil {
		return err
	}
	// The hash is of the bytes the left store holds, which the response
	// is checked against.
	cur, ok, err := p.lh.get(kb)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("foreign-key join: left store %s has no row for a key it just changed", p.lstore)
	}
	if c.old != nil && !bytes.Equal(oldFK, newFK) {
		send(oldFK, fkUnsubscribe, nil)
	}
	instr := fkSubscribeIfFound
	if p.leftJoin || c.old != nil {
		instr = fkSubscribeAlways
	}
	send(newFK, instr, fkHash(cur))
	return nil
}

// fkSubscribeProc keeps the subscription index and answers subscriptions.
type fkSubscribeProc struct {
	index, rstore string
	ih, rh        *storeHandle
	pc            *procCtx
}

func (p *fkSubscribeProc) init(pc *procCtx) (err error) {
	p.pc = pc
	if p.ih, err = rawStore(pc, p.index); err != nil {
		return err
	}
	p.rh, err = rawStore(pc, p.rstore)
	return err
}

func (p *fkSubscribeProc) process(r record) error {
	fk, _ := r.key.([]byte)
	s, ok := r.value.(fkSubscription)
	if !ok || fk == nil {
		return errFKWire
	}
	ik := append(fkIndexPrefix(fk), s.leftKey...)
	if s.instr == fkUnsubscribe {
		return p.ih.put(ik, nil)
	}
	iv := append(binary.BigEndian.AppendUint32(nil, uint32(s.partition)), s.hash...)
	if err := p.ih.put(ik, iv); err != nil {
		return err
	}
	vb, found, err := p.rh.get(fk)
	if err != nil {
		return err
	}
	if found || s.instr == fkSubscribeAlways {
		p.pc.forward(record{key: bytes.Clone(s.leftKey), value: fkResponse{partition: s.partition, hash: bytes.Clone(s.hash), found: found, value: vb}, ts: r.ts}, "")
	}
	return nil
}

// fkRightChangeProc answers every subscriber of a right row that changed.
type fkRightChangeProc[KO any] struct {
	index, rstore string
	rks           Serde[KO]
	ih, rh        *storeHandle
	pc            *procCtx
}

func (p *fkRightChangeProc[KO]) init(pc *procCtx) (err error) {
	p.pc = pc
	if p.ih, err = rawStore(pc, p.index); err != nil {
		return err
	}
	p.rh, err = rawStore(pc, p.rstore)
	return err
}

func (p *fkRightChangeProc[KO]) process(r record) error {
	c, _ := r.value.(change)
	fk, err := p.rks.Encode(key[KO](r))
	if err != nil {
		return err
	}
	var vb []byte
	found := false
	if c.new != nil {
		if vb, found, err = p.rh.get(fk); err != nil {
			return err
		}
	}
	prefix := fkIndexPrefix(fk)
	var out []record
	var derr error
	err = p.ih.scan(prefix, prefixEnd(prefix), false, func(k, v []byte) bool {
		if len(v) < 4 {
			derr = errFKWire
			return false
		}
		resp := fkResponse{partition: int32(binary.BigEndian.Uint32(v)), hash: bytes.Clone(v[4:]), found: found, value: vb}
		out = append(out, record{key: bytes.Clone(k[len(prefix):]), value: resp, ts: r.ts})
		return true
	})
	if err = errors.Join(err, derr); err != nil {
		return err
	}
	for _, o := range out {
		p.pc.forward(o, "")
	}
	return nil
}

// fkResolveProc joins the responses that answer the left row's current
// value.
type fkResolveProc[K, V, VO, VR any] struct {
	lstore   string
	lks      Serde[K]
	lvs      Serde[V]
	rvs      Serde[VO]
	leftJoin bool
	joiner   func(V, VO, bool) VR
	lh       *storeHandle
	pc       *procCtx
}

func (p *fkResolveProc[K, V, VO, VR]) init(pc *procCtx) (err error) {
	p.pc = pc
	p.lh, err = rawStore(pc, p.lstore)
	return err
}

func (p *fkResolveProc[K, V, VO, VR]) process(r record) error {
	kb, _ := r.key.([]byte)
	resp, ok := r.value.(fkResponse)
	if !ok || kb == nil {
		return errFKWire
	}
	cur, ok, err := p.lh.get(kb)
	if err != nil {
		return err
	}
	if !ok || !bytes.Equal(fkHash(cur), resp.hash) {
		p.pc.task.count("fk-join-stale-responses", 1)
		return nil
	}
	k, err := p.lks.Decode(kb)
	if err != nil {
		return err
	}
	v, err := p.lvs.Decode(cur)
	if err != nil {
		return err
	}
	out := record{key: k, ts: r.ts, headers: r.headers}
	switch {
	case resp.found:
		vo, err := p.rvs.Decode(resp.value)
		if err != nil {
			return err
		}
		out.value = p.joiner(v, vo, true)
	case p.leftJoin:
		var zero VO
		out.value = p.joiner(v, zero, false)
	}
	p.pc.forward(out, "")
	return nil
}
