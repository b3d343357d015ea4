package state

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

func TestTxnBuffersUntilApply(t *testing.T) {
	e, err := OpenDisk(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p := e.Partition("counts", 2)
	other := e.Partition("counts", 3)
	x := e.NewTxn()
	defer x.Close()
	x.Put(p, []byte("a"), []byte("1"))
	x.Put(p, []byte("b"), []byte("2"))
	x.Put(other, []byte("a"), []byte("other"))
	if v, ok, _ := x.Get(p, []byte("a")); !ok || string(v) != "1" {
		t.Fatalf("the buffer does not read its own write: %q %v", v, ok)
	}
	if _, ok, _ := p.Get([]byte("a")); ok {
		t.Fatal("a buffered write is visible before Apply")
	}
	x.SetOffset(p, 41)
	x.SetOffset(p, 40) // an earlier offset never moves it back
	if err := x.Apply(); err != nil {
		t.Fatal(err)
	}
	if v, ok, _ := p.Get([]byte("a")); !ok || string(v) != "1" {
		t.Fatalf("after Apply: %q %v", v, ok)
	}
	if off, ok, _ := p.Offset(); !ok || off != 41 {
		t.Fatalf("offset %d %v, want 41", off, ok)
	}
	if _, ok, _ := other.Offset(); ok {
		t.Fatal("a partition without SetOffset got an offset")
	}
	x.Delete(p, []byte("a"))
	x.Put(p, []byte("c"), []byte("3"))
	x.Discard()
	if v, ok, _ := p.Get([]byte("a")); !ok || string(v) != "1" {
		t.Fatalf("a discarded delete took effect: %q %v", v, ok)
	}
	var keys []string
	p.Scan(nil, nil, func(k, v []byte) bool { keys = append(keys, string(k)); return true })
	if fmt.Sprint(keys) != "[a b]" {
		t.Fatalf("scan of partition 2: %v (partitions must not leak into each other)", keys)
	}
	if err := p.Wipe(); err != nil {
		t.Fatal(err)
	}
	if empty, _ := p.Empty(); !empty {
		t.Fatal("not empty after Wipe")
	}
	if _, ok, _ := p.Offset(); ok {
		t.Fatal("offset survived Wipe")
	}
	if v, _, _ := other.Get([]byte("a")); string(v) != "other" {
		t.Fatal("Wipe of one partition touched another")
	}
}

// TestCrashKeepsAPrefix checks the invariant restore depends on: with the
// write-ahead log off, an engine that is closed without a flush (as a
// crash leaves it) reopens at some earlier applied batch, whole, with the
// offset that batch carried — never a mix, never data without its offset.
func TestCrashKeepsAPrefix(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	dir := t.TempDir()
	e, err := OpenDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := e.Partition("s", 0)
	// model[i] is the partition's content after batch i (offset i).
	model := []map[string]string{{}}
	flushed := 0
	for batch := 1; batch <= 300; batch++ {
		x := e.NewTxn()
		cur := map[string]string{}
		for k, v := range model[len(model)-1] {
			cur[k] = v
		}
		for i := 0; i < 1+rng.IntN(20); i++ {
			k := fmt.Sprintf("k%03d", rng.IntN(200))
			if rng.IntN(5) == 0 {
				x.Delete(p, []byte(k))
				delete(cur, k)
			} else {
				v := fmt.Sprintf("v%d-%d", batch, i)
				x.Put(p, []byte(k), []byte(v))
				cur[k] = v
			}
		}
		x.SetOffset(p, int64(batch))
		if err := x.Apply(); err != nil {
			t.Fatal(err)
		}
		x.Close()
		model = append(model, cur)
		if rng.IntN(60) == 0 {
			if err := e.Flush(); err != nil {
				t.Fatal(err)
			}
			flushed = batch
		}
	}
	e.Close() // no flush: what a SIGKILL leaves
	e, err = OpenDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p = e.Partition("s", 0)
	off, ok, err := p.Offset()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		off = 0
	}
	if off < int64(flushed) {
		t.Fatalf("reopened at offset %d, before the last flush (%d)", off, flushed)
	}
	got := map[string]string{}
	p.Scan(nil, nil, func(k, v []byte) bool { got[string(k)] = string(bytes.Clone(v)); return true })
	want := model[off]
	if len(got) != len(want) {
		t.Fatalf("reopened at offset %d with %d keys; that batch left %d", off, len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("reopened at offset %d: key %s = %q, that batch left %q", off, k, got[k], v)
		}
	}
	t.Logf("reopened at offset %d of 300 (last flush at %d)", off, flushed)
}

func TestRestorerAndMemory(t *testing.T) {
	e, err := OpenMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p := e.Partition("m", 1)
	r := e.NewRestorer()
	defer r.Close()
	r.Apply(p, []byte("x"), []byte("1"), 5)
	r.Apply(p, []byte("y"), []byte("2"), 6)
	r.Apply(p, []byte("x"), nil, 7) // tombstone
	r.SetOffset(p, 8)               // a transaction marker
	if err := r.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := p.Get([]byte("x")); ok {
		t.Fatal("tombstone not applied")
	}
	if v, _, _ := p.Get([]byte("y")); string(v) != "2" {
		t.Fatalf("y = %q", v)
	}
	if off, _, _ := p.Offset(); off != 8 {
		t.Fatalf("offset %d, want 8", off)
	}
}

// TestTxnAgainstModel runs seeded random operations through a Txn (point
// reads and writes in its unindexed mode, range reads and range deletions
// that index it, applies and discards) and checks every read against a
// plain model: committed map plus the transaction's overlay.
func TestTxnAgainstModel(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		e, err := OpenDisk(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		p, q := e.Partition("s", 0), e.Partition("s", 1)
		x := e.NewTxn()
		rng := rand.New(rand.NewPCG(seed, 3))
		committed := map[string]string{}
		pending := map[string]*string{} // nil: deleted
		key := func() string { return fmt.Sprintf("k%02d", rng.IntN(30)) }
		view := func() map[string]string {
			m := map[string]string{}
			for k, v := range committed {
				m[k] = v
			}
			for k, v := range pending {
				if v == nil {
					delete(m, k)
				} else {
					m[k] = *v
				}
			}
			return m
		}
		for i := 0; i < 2000; i++ {
			switch op := rng.IntN(100); {
			case op < 40:
				k, v := key(), fmt.Sprint(i)
				x.Put(p, []byte(k), []byte(v))
				pending[k] = &v
			case op < 50:
				k := key()
				x.Delete(p, []byte(k))
				pending[k] = nil
			case op < 80:
				k := key()
				got, ok, err := x.Get(p, []byte(k))
				want, wok := view()[k]
				if err != nil || ok != wok || string(got) != want {
					t.Fatalf("seed %d op %d: Get(%s) = %q %v %v, want %q %v", seed, i, k, got, ok, err, want, wok)
				}
			case op < 88:
				lo, hi := key(), key()
				if lo > hi {
					lo, hi = hi, lo
				}
				var got []string
				x.Scan(p, []byte(lo), []byte(hi), false, func(k, v []byte) bool {
					got = append(got, string(k)+"="+string(v))
					return true
				})
				var want []string
				m := view()
				for k, v := range m {
					if k >= lo && k < hi {
						want = append(want, k+"="+v)
					}
				}
				sort.Strings(want)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("seed %d op %d: Scan[%s,%s) = %v, want %v", seed, i, lo, hi, got, want)
				}
			case op < 91:
				lo, hi := key(), key()
				if lo > hi {
					lo, hi = hi, lo
				}
				x.DeleteRange(p, []byte(lo), []byte(hi))
				for k := range view() {
					if k >= lo && k < hi {
						pending[k] = nil
					}
				}
			case op < 97:
				// Another partition's writes never show in p.
				x.Put(q, []byte(key()), []byte("q"))
				if err := x.Apply(); err != nil {
					t.Fatal(err)
				}
				committed, pending = view(), map[string]*string{}
			default:
				x.Discard()
				pending = map[string]*string{}
			}
		}
		x.Close()
		e.Close()
	}
}
