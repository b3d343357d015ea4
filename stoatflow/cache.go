package stoatflow

import "fmt"

// changeCache holds a table's latest change per key until the task
// commits, so that downstream gets one update per key per commit rather
// than every one (Kafka Streams' record cache). It changes how many
// updates are forwarded, never which values the store holds: the store
// is written at once, so interactive queries and the changelog see the
// same as without the cache. Nil when state.cache-max-keys is 0.
type changeCache struct {
	pc    *procCtx
	max   int
	index map[string]int // encoded key → position in order
	order []record       // pending changes, in the order their keys first changed
}

// newChangeCache returns the node's cache, registered with its task for
// the flush at commit; nil when the cache is off.
func newChangeCache(pc *procCtx) *changeCache {
	n := pc.task.app.cfg.State.CacheMaxKeys
	if n <= 0 {
		return nil
	}
	c := &changeCache{pc: pc, max: n, index: map[string]int{}}
	pc.task.caches = append(pc.task.caches, c)
	return c
}

// add records r (whose value is a change) as its key's latest change,
// keeping the oldest old value, so that what is forwarded spans every
// update since the last flush.
func (c *changeCache) add(kb []byte, r record) error {
	if i, ok := c.index[string(kb)]; ok {
		ch := r.value.(change)
		ch.old = c.order[i].value.(change).old
		r.value = ch
		c.order[i] = r
		return nil
	}
	c.index[string(kb)] = len(c.order)
	c.order = append(c.order, r)
	if len(c.order) >= c.max {
		return c.flush()
	}
	return nil
}

// flush forwards the pending changes. A key created and deleted since
// the last flush changed nothing downstream and is not forwarded.
func (c *changeCache) flush() error {
	order := c.order
	c.order = c.order[:0:0]
	clear(c.index)
	t := c.pc.task
	for _, r := range order {
		if ch := r.value.(change); ch.new == nil && ch.old == nil {
			continue
		}
		c.pc.forward(r, "")
		if t.err != nil {
			return t.err
		}
	}
	return nil
}

// forwardChange forwards a table's change now, or through its cache.
func forwardChange(pc *procCtx, cache *changeCache, kb []byte, r record) error {
	if cache == nil {
		pc.forward(r, "")
		return nil
	}
	return cache.add(kb, r)
}

// flushCaches forwards what every cache of the task holds, upstream
// nodes first so that a downstream cache receives before it flushes. The
// coordinator calls it before a commit.
func (t *task) flushCaches() error {
	t.err = nil
	for _, c := range t.caches {
		if err := c.flush(); err != nil {
			return fmt.Errorf("task %s: flush the cache of %s: %w", t.id, c.pc.node.name, err)
		}
	}
	return nil
}
