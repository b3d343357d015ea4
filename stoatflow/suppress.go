package stoatflow

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Suppression says what Suppress holds back.
type Suppression int

// UntilWindowCloses holds every update of a window back and emits the
// window's final value once, when stream time reaches the window's close:
// its end plus grace (a session: its end plus gap plus grace).
const UntilWindowCloses Suppression = 1

// Suppress emits only the final result of each window of a windowed table.
// Updates wait in a buffer store named <table's store>-suppress, with its
// changelog, so what is held back survives a restart or an abort. A
// window whose session was merged into another leaves the buffer without
// output (it was never final).
//
// Stream time here is the highest timestamp of the updates reaching
// Suppress in the task (it survives restarts, in the buffer store): a
// window closes only once a later record of the same partition arrives.
// The table returned is not materialized (Store is empty).
func Suppress[K, V any](t Table[Windowed[K], V], until Suppression, opts ...StoreOption) Table[Windowed[K], V] {
	if t.win == nil {
		t.t.fail("Suppress: %s is not a windowed aggregation's table", t)
		return t
	}
	if until != UntilWindowCloses {
		t.t.fail("Suppress: unknown suppression %d", until)
		return t
	}
	name := t.store + "-suppress"
	ks, vs := t.ks, t.vs
	// The buffer's keys are close time | windowed key; it is read only by
	// Suppress, so its serdes only print it for interactive queries.
	keyText := anySerde{
		enc: func(any) ([]byte, error) { return nil, fmt.Errorf("store %s is a suppression buffer", name) },
		dec: func(b []byte) (any, error) {
			if len(b) < 8 {
				return nil, fmt.Errorf("suppression buffer key of %d bytes", len(b))
			}
			w, err := ks.Decode(b[8:])
			if err != nil {
				return nil, err
			}
			return map[string]any{"closeAt": time.UnixMilli(int64(binary.BigEndian.Uint64(b))).UTC(), "window": w}, nil
		},
	}
	valText := anySerde{
		enc: keyText.enc,
		dec: func(b []byte) (any, error) {
			if len(b) < 8 {
				return nil, fmt.Errorf("suppression buffer value of %d bytes", len(b))
			}
			return vs.Decode(b[8:])
		},
	}
	t.t.addStore(name, kindKeyValue, nil, nil, keyText, valText, "suppression buffer", opts).hasMeta = true
	n := t.t.addNode(name, "suppress", t.n)
	n.stores = []string{name}
	win := t.win
	n.make = func() nodeProc { return &suppressProc[K, V]{store: name, win: win, ks: ks, vs: vs} }
	return Table[Windowed[K], V]{t: t.t, n: n, ks: ks, vs: vs, win: win}
}

type suppressProc[K, V any] struct {
	store string
	win   *windowSpec
	ks    Serde[Windowed[K]]
	vs    Serde[V]
	h     *storeHandle
	pc    *procCtx
}

func (p *suppressProc[K, V]) init(pc *procCtx) error {
	p.pc = pc
	s, err := pc.store(p.store)
	if err != nil {
		return err
	}
	p.h = s.handle()
	return nil
}

func (p *suppressProc[K, V]) process(r record) error {
	w, ok := r.key.(Windowed[K])
	if !ok {
		return fmt.Errorf("suppress: key %T is not a Windowed key", r.key)
	}
	c, _ := r.value.(change)
	kb, err := p.ks.Encode(w)
	if err != nil {
		return err
	}
	closeAt := p.win.closeAt(w.Start.UnixMilli(), w.End.UnixMilli())
	bk := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(kb)), uint64(closeAt))
	bk = append(bk, kb...)
	if c.new == nil {
		err = p.h.put(bk, nil)
	} else {
		v, _ := c.new.(V)
		var vb []byte
		if vb, err = p.vs.Encode(v); err != nil {
			return err
		}
		err = p.h.put(bk, append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(vb)), uint64(r.ts)), vb...))
	}
	if err != nil {
		return err
	}
	// The buffer's stream time lives beside it, so that a restarted task
	// emits what closed before the restart at the same point.
	o, err := observedTime(handleReader{p.h})
	if err != nil {
		return err
	}
	if r.ts > o {
		o = r.ts
		if err := p.h.put(metaObserved, binary.BigEndian.AppendUint64(nil, uint64(o))); err != nil {
			return err
		}
	}
	return p.evict(o)
}

// evict emits and removes, oldest close first, every buffered window that
// is closed at stream time o.
func (p *suppressProc[K, V]) evict(o int64) error {
	type entry struct{ k, v []byte }
	var due []entry
	err := p.h.scan(nil, dataEnd, false, func(k, v []byte) bool {
		if int64(binary.BigEndian.Uint64(k)) > o {
			return false
		}
		due = append(due, entry{append([]byte(nil), k...), append([]byte(nil), v...)})
		return true
	})
	if err != nil {
		return err
	}
	for _, e := range due {
		w, err := p.ks.Decode(e.k[8:])
		if err != nil {
			return err
		}
		v, err := p.vs.Decode(e.v[8:])
		if err != nil {
			return err
		}
		if err := p.h.put(e.k, nil); err != nil {
			return err
		}
		p.pc.forward(record{key: w, value: change{new: v}, ts: int64(binary.BigEndian.Uint64(e.v))}, "")
	}
	return nil
}
